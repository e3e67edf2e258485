package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// The whole demo, smaller: replicas as processes behind the balancer, the load
// generator through it, unsafe then the default strategy.
func TestDemoShowsOversellThenNone(t *testing.T) {
	getenv := func(k string) string {
		if k == "REDIS_URL" {
			return os.Getenv("STOCKGUARD_TEST_REDIS_URL")
		}
		return "" // SQLite in the demo's own folder
	}
	// A bound against a hang, not a speed target: the demo builds both binaries
	// first, which on a busy machine with a cold cache takes minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	page := filepath.Join(t.TempDir(), "page", "demo.html")
	// Enough buyers for the stock that the unsafe round's races show even on a
	// busy machine. Rounds of the default length (5s), so that the screenshot
	// kept for the README (docs/demo.png) is of what make demo shows.
	err := run(ctx, []string{"-html", page, "-replicas", "3", "-stock", "100", "-vus", "64",
		"-cart-stock", "20", "-shoppers", "300", "-hold-ttl", "3s", "-sweep-interval", "200ms"}, getenv, &out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
	}
	var unsafe, locked, carts []string
	for _, l := range strings.Split(out.String(), "\n") {
		switch f := strings.Fields(l); {
		case len(f) == 8 && f[0] == "unsafe":
			unsafe = f
		case len(f) == 8 && f[0] == string(orders.DefaultStrategy):
			locked = f
		case len(f) == 9 && f[0] == "carts":
			carts = f
		}
	}
	if locked == nil || unsafe == nil {
		t.Fatalf("no result table:\n%s", out.String())
	}
	if locked[3] != "100" || locked[4] != "0" {
		t.Fatalf("lock round: sold %s, oversold %s; want 100 and 0\n%s", locked[3], locked[4], out.String())
	}
	if unsafe[4] == "0" {
		t.Fatalf("the unsafe round oversold nothing: the demo shows nothing\n%s", out.String())
	}
	checkCarts(t, carts, 20, out.String())
	// Each round's events, read from the feed: the guarded rounds' rebuild
	// their SKU's counters; the unsafe round's are said to be what they are.
	for _, want := range []string{"events of the unsafe round: ", "the counters the unsafe strategy wrote",
		"events of the " + string(orders.DefaultStrategy) + " round: ", "events of the carts round: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo does not print %q\n%s", want, out.String())
		}
	}
	for l := range strings.Lines(out.String()) {
		if strings.HasPrefix(l, "events of the ") {
			t.Log(strings.TrimSpace(l))
		}
		if strings.HasPrefix(l, "events of the ") && !strings.HasPrefix(l, "events of the unsafe") &&
			(!strings.Contains(l, ", no gap; rebuilt from the events = the SKU's counters") || strings.Contains(l, "had not caught up")) {
			t.Errorf("a guarded round's events do not rebuild its counters: %s", l)
		}
	}

	// The page of the three rounds, from what the demo sampled: written where
	// -html says, named at the end, and drawn.
	if !strings.Contains(out.String(), "then the carts round: "+pageLink(page)) {
		t.Errorf("the demo does not say where its page is:\n%s", out.String())
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatalf("the demo wrote no page: %v", err)
	}
	checkPage(t, b, 3)
	if !strings.Contains(string(b), "64 VUs for 5s") {
		t.Errorf("the page is not of rounds of the default length, 5s: its screenshot is not what make demo shows")
	}
	shot := screenshot(t, page)
	checkScreenshot(t, shot)
	if dst := os.Getenv("STOCKGUARD_DEMO_SCREENSHOT"); dst != "" { // next to the fixture's
		keepScreenshot(t, shot, strings.TrimSuffix(dst, filepath.Ext(dst))+"-run.png")
	}
}

// checkCarts checks the carts round's row: round stocked holds held sold
// expired resold released oversold.
func checkCarts(t *testing.T, row []string, stock int, out string) {
	t.Helper()
	if row == nil {
		t.Fatalf("no carts table:\n%s", out)
	}
	n := make([]int, len(row))
	for i, f := range row[1:] {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("carts row %q: %v", row, err)
		}
		n[i+1] = v
	}
	stocked, holds, held, sold, expired, resold, released, oversold := n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8]
	switch {
	case oversold != 0:
		t.Errorf("carts: oversold %d", oversold)
	case stocked != stock || sold != stock:
		t.Errorf("carts: stocked %d, sold %d; want %d of each: more shoppers than units buy every unit", stocked, sold, stock)
	case expired == 0:
		t.Errorf("carts: no cart expired: the round shows no abandoned cart coming back")
	case resold == 0 || resold > expired:
		t.Errorf("carts: resold %d of %d expired; want some, and no more than came back", resold, expired)
	case held != sold+released+expired:
		t.Errorf("carts: held %d, but sold %d + released %d + expired %d", held, sold, released, expired)
	case holds == 0 || held < holds || held > 2*holds:
		t.Errorf("carts: %d units in %d holds of 1 or 2 units", held, holds)
	case !strings.Contains(out, "the carts round oversold nothing"):
		t.Errorf("carts: no verdict line")
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// The demo on the other lock services: the locked round sells the stock and
// oversells nothing, and says which lock service it ran on.
func TestDemoOnOtherLockServices(t *testing.T) {
	dbURL := os.Getenv("STOCKGUARD_TEST_DATABASE_URL")
	if dbURL == "" {
		if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
			t.Fatal("STOCKGUARD_TEST_DATABASE_URL is not set")
		}
		t.Skip("-lock postgres needs STOCKGUARD_TEST_DATABASE_URL")
	}
	for _, kind := range []string{"redlock", "postgres", "etcd", "zk", "azblob"} {
		t.Run(kind, func(t *testing.T) {
			// A lock service not installed here skips, as every other test
			// needing it does, before a database or a replica is started.
			testenv.NeedLockService(t, kind)
			db := testenv.NewDatabase(t, testenv.Postgres) // the demo's store, and postgres's locks
			getenv := func(k string) string {
				switch k {
				case "REDIS_URL":
					return os.Getenv("STOCKGUARD_TEST_REDIS_URL")
				case "DATABASE_URL":
					return db
				}
				return ""
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var out, errs bytes.Buffer
			err := run(ctx, []string{"-lock", kind, "-replicas", "3", "-stock", "50", "-vus", "32", "-duration", "2s",
				"-cart-stock", "10", "-shoppers", "60", "-hold-ttl", "2s", "-sweep-interval", "200ms"}, getenv, &out, &errs)
			if err != nil {
				t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
			}
			if !strings.Contains(out.String(), "oversold nothing: 3 replicas, one SKU, 50 units, 32 VUs, locks on "+kind) {
				t.Fatalf("no line saying the locked round oversold nothing on %s:\n%s", kind, out.String())
			}
		})
	}
}

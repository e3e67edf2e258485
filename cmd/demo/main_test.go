package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
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
	// Enough buyers for the stock that the unsafe round's races show even on a
	// busy machine.
	err := run(ctx, []string{"-replicas", "3", "-stock", "100", "-vus", "64", "-duration", "3s"}, getenv, &out, &errs)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errs.String())
	}
	var unsafe, locked []string
	for _, l := range strings.Split(out.String(), "\n") {
		switch f := strings.Fields(l); {
		case len(f) == 8 && f[0] == "unsafe":
			unsafe = f
		case len(f) == 8 && f[0] == string(orders.DefaultStrategy):
			locked = f
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
}

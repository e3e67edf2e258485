package azlease_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url, container, prefix string
	}{
		{"azblob://locks", "locks", ""},
		{"azblob://stockguard-locks/sku/", "stockguard-locks", "sku/"},
		{"azblob://abc/a/b", "abc", "a/b"},
	} {
		loc, err := azlease.ParseURL(c.url)
		if err != nil || loc.Container != c.container || loc.Prefix != c.prefix {
			t.Errorf("ParseURL(%q) = %+v, %v; want %s, %q", c.url, loc, err, c.container, c.prefix)
		}
	}
	for _, bad := range []string{
		"azblob://", "azblob://ab", "azblob://Locks", "azblob://a--b", "azblob://-ab", "redis://locks",
		"azblob://user:secret@locks", "azblob://locks:10000", "azblob://locks?sig=x", "://",
	} {
		_, err := azlease.ParseURL(bad)
		if !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidOptions", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseURL(%q) shows the password: %v", bad, err)
		}
	}
}

// A lease ID is a UUID, the same for a value in every process, another for
// another value.
func TestLeaseID(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := azlease.LeaseID("v1"), azlease.LeaseID("v2")
	if !uuid.MatchString(a) || a != azlease.LeaseID("v1") || a == b {
		t.Fatalf("LeaseID: %q, %q", a, b)
	}
}

// Open refuses a missing or malformed connection string by name, without
// showing it, and an account that does not answer within ctx.
func TestOpenRefuses(t *testing.T) {
	const url = "azblob://locks"
	if _, _, err := azlease.Open(ctxFor(t, time.Second), url, "", nil); !errors.Is(err, lock.ErrInvalidOptions) ||
		!strings.Contains(err.Error(), azlease.ConnectionStringEnv) {
		t.Errorf("no connection string: %v", err)
	}
	bad := "AccountKey=hunter2;nonsense"
	_, _, err := azlease.Open(ctxFor(t, time.Second), url, bad, nil)
	if !errors.Is(err, lock.ErrInvalidOptions) || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("malformed connection string: %v", err)
	}
	port, err := lockserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	conn := lockserver.AzuriteConnectionString("127.0.0.1:"+strconv.Itoa(port)) + "SharedAccessSignature=sv=1&sig=topsecret;"
	_, _, err = azlease.Open(ctxFor(t, 2*time.Second), url, conn, nil)
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("unreachable account: %v after %s", err, time.Since(start))
	}
	if strings.Contains(err.Error(), lockserver.AzuriteKey) || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("the error shows a secret: %v", err)
	}
}

// Renewals and Advance of one lease, concurrently in one process, never write
// the token back down, and the next grant's block lies above it all.
func TestRenewDoesNotUndoAdvance(t *testing.T) {
	s := startAzurite(t)
	url := containerURL(t)
	b := open(t, s, url)
	ctx := ctxFor(t, time.Minute)
	const v = "holder"
	tops, err := b.Obtain(ctx, []string{"r"}, v, 5*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var last int64
	wg.Go(func() {
		for range 20 {
			if err := b.Renew(ctx, []string{"r"}, v, 5*time.Second); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() {
		past := tops[0]
		for range 20 {
			n, err := b.Advance(ctx, "r", v, past)
			if err != nil {
				t.Error(err)
				return
			}
			past, last = n, n
		}
	})
	wg.Wait()
	if err := b.Release(ctx, []string{"r"}, v); err != nil {
		t.Fatal(err)
	}
	next, err := open(t, s, url).Obtain(ctx, []string{"r"}, "next", 5*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if next[0] <= last {
		t.Fatalf("the next grant's token %d is not above the last advanced %d", next[0], last)
	}
}

// A holder that stops renewing keeps its resource for its TTL on the server's
// clock, then another value breaks its lease: the old holder's Renew, Advance
// and Held then say it is not held, and its Release leaves the new holder's
// lease.
func TestStaleLeaseBroken(t *testing.T) {
	s := startAzurite(t)
	url := containerURL(t)
	old, other := open(t, s, url), open(t, s, url)
	ctx := ctxFor(t, time.Minute)
	if _, err := old.Obtain(ctx, []string{"r"}, "old", time.Second, 1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var err error
	for i := 0; i < 400; i++ { // at most 400 x 25ms = 10s
		if _, err = other.Obtain(ctx, []string{"r"}, "new", time.Second, 1); !errors.Is(err, lock.ErrBusy) {
			break
		}
		time.Sleep(25 * time.Millisecond) // polling, as a waiter does
	}
	if err != nil {
		t.Fatalf("the stale lease was not broken: %v", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 4*time.Second {
		t.Errorf("broken %s after the obtain of a 1s lease, want 1s..3s", d)
	}
	if err := old.Renew(ctx, []string{"r"}, "old", time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("renew by the broken holder: %v, want ErrNotHeld", err)
	}
	if _, err := old.Advance(ctx, "r", "old", 100); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("advance by the broken holder: %v, want ErrNotHeld", err)
	}
	if held, err := old.Held(ctx, "r", "old"); held || err != nil {
		t.Errorf("Held by the broken holder: %v, %v", held, err)
	}
	if err := old.Release(ctx, []string{"r"}, "old"); err != nil {
		t.Errorf("release by the broken holder: %v", err)
	}
	if held, err := other.Held(ctx, "r", "new"); !held || err != nil {
		t.Errorf("the new holder lost its lease to the old one's release: %v, %v", held, err)
	}
}

// A container gone (deleted, or lost by an emulator killed before it saved)
// is made again by the next Obtain, with tokens from 0 again: the store's
// fence is what orders them then.
func TestContainerMadeAgain(t *testing.T) {
	s := startAzurite(t)
	url := containerURL(t)
	b := open(t, s, url)
	ctx := ctxFor(t, time.Minute)
	if _, err := b.Obtain(ctx, []string{"r"}, "v", time.Second, 1); err != nil {
		t.Fatal(err)
	}
	loc, err := azlease.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := azblob.NewClientFromConnectionString(s.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.DeleteContainer(ctx, loc.Container, nil); err != nil {
		t.Fatal(err)
	}
	if held, err := b.Held(ctx, "r", "v"); held || err != nil {
		t.Fatalf("Held with the container gone: %v, %v", held, err)
	}
	if err := b.Renew(ctx, []string{"r"}, "v", time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Renew with the container gone: %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, []string{"r"}, "v"); err != nil {
		t.Fatalf("Release with the container gone: %v", err)
	}
	// Azurite takes a moment to forget a deleted container (409 while it is
	// being deleted): bounded retries.
	var tops []int64
	for i := 0; i < 100; i++ {
		if tops, err = b.Obtain(ctx, []string{"r"}, "w", time.Second, 1); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the server's state, bounded
	}
	if err != nil || tops[0] != 1 {
		t.Fatalf("Obtain after the container was deleted: %v, %v", tops, err)
	}
}

// A holder whose last write's answer it never saw (a timeout; here another
// Backend of the same value writes) still renews and advances: it reads the
// blob once and writes on that, and the token does not go down.
func TestWriteAfterLostAnswer(t *testing.T) {
	s := startAzurite(t)
	url := containerURL(t)
	b, twin := open(t, s, url), open(t, s, url)
	ctx := ctxFor(t, time.Minute)
	const v = "holder"
	if _, err := b.Obtain(ctx, []string{"r"}, v, 5*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	advanced, err := twin.Advance(ctx, "r", v, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx, []string{"r"}, v, 5*time.Second); err != nil {
		t.Fatalf("renew after a write it did not see: %v", err)
	}
	n, err := b.Advance(ctx, "r", v, 0)
	if err != nil || n != advanced+1 {
		t.Fatalf("advance after a write it did not see: %d, %v; want %d", n, err, advanced+1)
	}
}

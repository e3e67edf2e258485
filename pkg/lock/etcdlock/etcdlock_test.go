package etcdlock_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url, prefix string
		endpoints   []string
		user        string
	}{
		{"etcd://h1:2379", etcdlock.DefaultPrefix, []string{"http://h1:2379"}, ""},
		{"etcd://h1,h2:2380/app/locks/", "app/locks/", []string{"http://h1:2379", "http://h2:2380"}, ""},
		{"etcd://u:p%40ss@h1:2379/x", "x/", []string{"http://h1:2379"}, "u"},
	} {
		cfg, prefix, err := etcdlock.ParseURL(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if prefix != tc.prefix || strings.Join(cfg.Endpoints, " ") != strings.Join(tc.endpoints, " ") || cfg.Username != tc.user {
			t.Errorf("%s: prefix %q endpoints %v user %q", tc.url, prefix, cfg.Endpoints, cfg.Username)
		}
		if cfg.DialTimeout == 0 || cfg.Logger == nil {
			t.Errorf("%s: no dial timeout or logger", tc.url)
		}
	}
	for _, bad := range []string{"http://h:2379", "etcd://", "etcd://h1,,h2", "etcd://h1?x=1", "etcd://u:secret@h 1"} {
		_, _, err := etcdlock.ParseURL(bad)
		if !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", bad, err)
		}
	}
}

// Open of an address nothing answers on fails within the caller's deadline.
func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := etcdlock.Open(ctx, "etcd://127.0.0.1:1/x", nil)
	if err == nil {
		t.Fatal("Open of a closed port succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %s with a deadline of 500ms", d)
	}
}

// Calls the suite does not make: bad arguments, a renewal after the lease
// expired, a partial release, an advance that would overflow.
func TestBackendEdges(t *testing.T) {
	s := startEtcd(t)
	sp := newSpace(t, s)
	b := sp.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	v := value(t)
	if _, err := b.Obtain(ctx, []string{"a"}, v, time.Second, etcdlock.BlockCap+1); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Errorf("block above BlockCap: %v", err)
	}
	for _, names := range [][]string{nil, {""}, {"a", "a"}} {
		if _, err := b.Obtain(ctx, names, v, time.Second, 1); !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("names %q: %v, want ErrInvalidName", names, err)
		}
	}

	// Expiry: a renewal after etcd ended the lease is ErrNotHeld.
	if _, err := b.Obtain(ctx, []string{"e"}, v, time.Second, 1); err != nil {
		t.Fatal(err)
	}
	w := sp.open(t)
	if err := waitFree(ctx, w, "e"); err != nil {
		t.Fatal(err)
	}
	if err := b.Renew(ctx, []string{"e"}, v, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew after expiry: %v, want ErrNotHeld", err)
	}

	// A partial release frees only the names given; the rest stay held and renewable.
	v2 := value(t)
	if _, err := b.Obtain(ctx, []string{"p", "q"}, v2, 5*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"p"}, v2); err != nil {
		t.Fatal(err)
	}
	if held, _ := b.Held(ctx, "p", v2); held {
		t.Error("p held after its release")
	}
	if held, _ := b.Held(ctx, "q", v2); !held {
		t.Error("q not held after the release of p alone")
	}
	if err := b.Renew(ctx, []string{"q"}, v2, 5*time.Second); err != nil {
		t.Errorf("renew of q: %v", err)
	}
	if err := b.Release(ctx, []string{"q"}, v2); err != nil {
		t.Fatal(err)
	}

	// Advance past a token near the top of int64 fails, and leaves the counter usable.
	v3 := value(t)
	tops, err := b.Obtain(ctx, []string{"o"}, v3, 5*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Advance(ctx, "o", v3, math.MaxInt64-1); err == nil {
		t.Error("advance past MaxInt64-1 succeeded")
	}
	n, err := b.Advance(ctx, "o", v3, tops[0]+5000)
	if err != nil || n <= tops[0]+5000 {
		t.Errorf("advance: %d, %v", n, err)
	}
	if err := b.Release(ctx, []string{"o"}, v3); err != nil {
		t.Fatal(err)
	}
}

// waitFree obtains and releases name, retrying while busy, within ctx.
func waitFree(ctx context.Context, b *etcdlock.Backend, name string) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		v := "waiter"
		_, err := b.Obtain(ctx, []string{name}, v, 5*time.Second, 1)
		if err == nil {
			return b.Release(ctx, []string{name}, v)
		}
		if !errors.Is(err, lock.ErrBusy) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// A waiter's Subscribe hears of the release of the name it found held, by
// another process, through the watch on the holder's key: released, and
// expired.
func TestSubscribeHearsPredecessor(t *testing.T) {
	s := startEtcd(t)
	sp := newSpace(t, s)
	holder, waiter := sp.open(t), sp.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names, stop, err := waiter.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	for _, release := range []bool{true, false} {
		v := value(t)
		if _, err := holder.Obtain(ctx, []string{"r"}, v, time.Second, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := waiter.Obtain(ctx, []string{"r"}, value(t), time.Second, 1); !errors.Is(err, lock.ErrBusy) {
			t.Fatalf("obtain while held: %v", err)
		}
		start := time.Now()
		if release {
			if err := holder.Release(ctx, []string{"r"}, v); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case n := <-names:
			if n != "r" {
				t.Fatalf("announced %q, want r", n)
			}
			t.Logf("released=%v: announced after %s", release, time.Since(start).Round(time.Millisecond))
		case <-ctx.Done():
			t.Fatalf("released=%v: no announcement", release)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-names; ok {
		t.Fatal("the channel is open after stop")
	}
}

package skulock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/skulock"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func TestLockerSpeaksTheDomainsErrors(t *testing.T) {
	env := testenv.NewRedis(t)
	keys := redislease.Keys{Namespace: env.Namespace}
	newLocker := func(wait time.Duration) *skulock.Locker {
		lc, err := redislease.NewClient(env.Client(t), &redislease.Options{Keys: keys}, &lock.Options{Wait: wait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lc.Close() })
		return skulock.NewLocker(lc, orders.DependencyRedis)
	}
	// a must get the free lock whatever the machine's load; b must not get it
	// while a holds it, and need not wait long to find out.
	a, b := newLocker(10*time.Second), newLocker(50*time.Millisecond)
	ctx := context.Background()
	mine := errors.New("mine")
	err := a.WithLocks(ctx, []string{"A"}, func(ctx context.Context, g orders.Grant) error {
		f := g.Fences()
		if f["A"] <= 0 {
			t.Errorf("no fencing token: %v", f)
		}
		if err := b.WithLocks(ctx, []string{"A"}, func(context.Context, orders.Grant) error { return nil }); !errors.Is(err, orders.ErrBusy) {
			t.Errorf("while held elsewhere: %v, want ErrBusy", err)
		}
		committed := f["A"] + 1_000_000_000_000 // a store that has seen a larger token
		if err := g.Advance(ctx, "A", committed); err != nil || g.Fences()["A"] <= committed {
			t.Errorf("advance: %v, token %d; want one above %d", err, g.Fences()["A"], committed)
		}
		return mine
	})
	if !errors.Is(err, mine) {
		t.Fatalf("fn's own error came back as %v", err)
	}
}

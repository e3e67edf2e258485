package redislease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// grantToken runs one Do on name and returns its token.
func grantToken(ctx context.Context, t *testing.T, c *lock.Client, name string) int64 {
	t.Helper()
	var tok int64
	if err := c.Do(ctx, []string{name}, func(_ context.Context, g *lock.Grant) error { tok = g.Token(name); return nil }); err != nil {
		t.Fatal(err)
	}
	return tok
}

// A counter that went back (a failover to a replica that lagged) still issues
// tokens above the ones issued before: the counter is a clock.
func TestTokensStayAboveAfterTheCounterWentBack(t *testing.T) {
	env := newRedis(t)
	c := newClient(t, env.Client(t), env.Namespace, nil)
	admin := env.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	before := grantToken(ctx, t, c, "r")
	before = max(before, grantToken(ctx, t, c, "r"))
	mustDo(t, admin.Set(ctx, redislease.Keys{Namespace: env.Namespace}.Fence("r"), 7, 0).Err()) // the promoted replica's stale counter
	if after := grantToken(ctx, t, c, "r"); after <= before {
		t.Fatalf("token %d after the counter went back is not above %d", after, before)
	}
}

// When the store has accepted a token the counter has not reached, Advance gives
// the holder a token above it, and later grants stay above that.
func TestAdvanceMovesPastTheStoresToken(t *testing.T) {
	env := newRedis(t)
	c := newClient(t, env.Client(t), env.Namespace, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var accepted, advanced int64
	err := c.Do(ctx, []string{"a", "r"}, func(ctx context.Context, g *lock.Grant) error {
		accepted = g.Token("r") + 1_000_000_000_000 // a token from a clock far ahead
		n, err := g.Advance(ctx, "r", accepted)
		advanced = n
		if err == nil && g.Token("r") != n {
			t.Errorf("the grant still says %d after advancing to %d", g.Token("r"), n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if advanced <= accepted {
		t.Fatalf("advanced to %d, not above the accepted %d", advanced, accepted)
	}
	if next := grantToken(ctx, t, c, "r"); next <= advanced {
		t.Fatalf("the next grant's token %d is not above the advanced %d", next, advanced)
	}
}

// Only the holder can advance: a caller whose lock is gone gets ErrLeaseLost and
// the counter does not move.
func TestAdvanceRefusedToALostLock(t *testing.T) {
	env := newRedis(t)
	c := newClient(t, env.Client(t), env.Namespace, nil)
	admin := env.Client(t)
	k := redislease.Keys{Namespace: env.Namespace}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var advErr error
	var counter string
	_ = c.Do(ctx, []string{"r"}, func(ctx context.Context, g *lock.Grant) error {
		mustDo(t, admin.Set(ctx, k.Lock("r"), "someone else", time.Minute).Err())
		_, advErr = g.Advance(ctx, "r", g.Token("r")+1_000_000_000_000)
		counter = admin.Get(ctx, k.Fence("r")).Val()
		return nil
	})
	if !errors.Is(advErr, lock.ErrLeaseLost) {
		t.Fatalf("advance on a lost lock: %v, want ErrLeaseLost", advErr)
	}
	if after := admin.Get(ctx, k.Fence("r")).Val(); after != counter {
		t.Fatalf("the counter moved from %s to %s for a caller that lost its lock", counter, after)
	}
	if _, err := (&lock.Grant{}).Advance(ctx, "x", 1); !errors.Is(err, lock.ErrInvalidName) {
		t.Fatalf("advance of a name outside the grant: %v, want ErrInvalidName", err)
	}
}

// A lease whose token was advanced is not handed to the next local holder with
// the rest of its block (tokens now below the store's): the next holder obtains
// anew and its token is above the advanced one.
func TestAdvancedLeaseIsNotHandedOn(t *testing.T) {
	env := newRedis(t)
	m := lockprom.New("adv")
	c := newClient(t, env.Client(t), env.Namespace, &lock.Options{Metrics: m})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var advanced, next int64
	nextErr := make(chan error, 1)
	err := c.Do(ctx, []string{"r"}, func(fctx context.Context, g *lock.Grant) error {
		go func() {
			nextErr <- c.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error { next = g.Token("r"); return nil })
		}()
		waitFor(ctx, t, func() bool { return metricValue(t, m, "adv_lock_waiting", nil) >= 1 })
		n, err := g.Advance(fctx, "r", g.Token("r")+1_000_000_000_000)
		advanced = n
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-nextErr; err != nil {
		t.Fatal(err)
	}
	if next <= advanced {
		t.Fatalf("the next local holder's token %d is not above the advanced %d", next, advanced)
	}
}

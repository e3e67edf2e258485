package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// holdCheck detects overlapping holds of one resource and lost updates of a value
// updated without atomicity, as a broken lock would show them.
type holdCheck struct {
	inside, overlaps, value atomic.Int64
	lastToken               atomic.Int64
	tokenDrops              atomic.Int64
}

func (h *holdCheck) hold(token int64) {
	if h.inside.Add(1) != 1 {
		h.overlaps.Add(1)
	}
	if token <= h.lastToken.Load() {
		h.tokenDrops.Add(1)
	}
	h.lastToken.Store(token)
	v := h.value.Load() // read, yield, write: updates are lost unless the lock holds
	time.Sleep(0)
	h.value.Store(v + 1)
	h.inside.Add(-1)
}

// Mutual exclusion from several processes on overlapping sets is the
// conformance suite's (TestRedisConformance/MutualExclusion).

func TestHoldCheckSeesOverlap(t *testing.T) {
	// The detector itself must be able to fail: two holds at once are counted.
	var h holdCheck
	h.inside.Add(1)
	h.hold(1)
	h.hold(1)
	if h.overlaps.Load() != 2 || h.tokenDrops.Load() != 1 {
		t.Fatalf("overlaps %d, token drops %d; want 2 and 1", h.overlaps.Load(), h.tokenDrops.Load())
	}
}

func TestWatchdogKeepsLockPastTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	// holdLong is the work: three leases long, while another client keeps trying to
	// obtain the lock and must fail every time.
	holdLong := func(other *redislock.Client, key string) func(context.Context, *lock.Grant) error {
		return func(ctx context.Context, _ *lock.Grant) error {
			start := time.Now()
			tick := time.NewTicker(ttl / 10)
			defer tick.Stop()
			for time.Since(start) < 3*ttl {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-tick.C:
				}
				if _, err := other.Obtain(ctx, key, ttl, nil); !errors.Is(err, redislock.ErrNotObtained) {
					return fmt.Errorf("another client obtained the lock at %s: %w", time.Since(start), err)
				}
			}
			return nil
		}
	}

	t.Run("first holder", func(t *testing.T) {
		env := newRedis(t)
		c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: ttl})
		other, admin := redislock.New(env.Client(t)), env.Client(t)
		key := redislease.Keys{Namespace: env.Namespace}.Lock("w")
		ctx := context.Background()

		warm(t, c) // so the leak check below sees only what Do itself starts
		defer noLeaks(t)()
		if err := c.Do(ctx, []string{"w"}, holdLong(other, key)); err != nil {
			t.Fatal(err)
		}
		if n := admin.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("lock key still exists after the call")
		}
	})

	t.Run("holder the lease was handed to", func(t *testing.T) {
		env := newRedis(t)
		m := lockprom.New("w")
		c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: ttl, Metrics: m})
		other, admin := redislock.New(env.Client(t)), env.Client(t)
		key := redislease.Keys{Namespace: env.Namespace}.Lock("w")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		warm(t, c)
		defer noLeaks(t)()
		handoffs := func() float64 {
			return metricValue(t, m, "w_lock_handoffs_total", map[string]string{"result": "ok"})
		}
		before := handoffs()
		second := make(chan error, 1)
		err := c.Do(ctx, []string{"w"}, func(context.Context, *lock.Grant) error {
			go func() { second <- c.Do(ctx, []string{"w"}, holdLong(other, key)) }()
			waitFor(ctx, t, func() bool { return metricValue(t, m, "w_lock_waiting", nil) == 1 })
			return nil
		})
		if err := errors.Join(err, <-second); err != nil {
			t.Fatal(err)
		}
		if got := handoffs() - before; got != 1 {
			t.Fatalf("%v handoffs, want 1: the second holder did not get the lease from the first", got)
		}
		if n := admin.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("lock key still exists after the calls")
		}
	})
}

// warm makes one uncontended and one contended call, so that the release
// subscription and the connection pools exist before a leak check snapshot.
func warm(t *testing.T, c *lock.Client) {
	t.Helper()
	ctx := context.Background()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, []string{"warm"}, func(context.Context, *lock.Grant) error { close(held); return nil })
	}()
	<-held
	if err := c.Do(ctx, []string{"warm"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLeaseLostCancelsBeforeLeaseEnds(t *testing.T) {
	const ttl = 600 * time.Millisecond
	faults := []struct {
		name   string
		inject func(t *testing.T, srv *redisServer, admin *redis.Client, key string) (undo func())
	}{
		{"key deleted", func(t *testing.T, _ *redisServer, admin *redis.Client, key string) func() {
			mustDo(t, admin.Del(context.Background(), key).Err())
			return func() {}
		}},
		{"PEXPIRE 1", func(t *testing.T, _ *redisServer, admin *redis.Client, key string) func() {
			mustDo(t, admin.PExpire(context.Background(), key, time.Millisecond).Err())
			return func() {}
		}},
		{"server stopped (SIGSTOP)", func(_ *testing.T, srv *redisServer, _ *redis.Client, _ string) func() {
			srv.Pause()
			return srv.Resume
		}},
		{"server stalled (DEBUG SLEEP)", func(_ *testing.T, _ *redisServer, admin *redis.Client, _ string) func() {
			done := make(chan struct{})
			go func() { defer close(done); admin.Do(context.Background(), "DEBUG", "SLEEP", "1.5") }()
			return func() { <-done }
		}},
		{"server killed", func(_ *testing.T, srv *redisServer, _ *redis.Client, _ string) func() {
			srv.Kill()
			return func() {}
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			srv := startRedisServer(t)
			env := newRedisAt(t, srv.Addr)
			m := lockprom.New("test")
			c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: ttl, Metrics: m})
			admin := env.Client(t)
			key := redislease.Keys{Namespace: env.Namespace}.Lock("x")

			warm(t, c)
			defer noLeaks(t)()
			before := time.Now() // the lease cannot end before before+ttl
			end := before.Add(ttl)
			// A timer for the lease's end measures how late this machine runs its
			// timers: a process starved of CPU cannot cancel on time, which is
			// why the database checks the fence. The watchdog is judged on time
			// as this process could keep it.
			late := make(chan time.Duration, 1)
			probe := time.AfterFunc(time.Until(end), func() { late <- time.Since(end) })
			defer probe.Stop()
			var cancelledAt time.Time
			var cause error
			var undo func()
			err := c.Do(context.Background(), []string{"x"}, func(ctx context.Context, _ *lock.Grant) error {
				undo = f.inject(t, srv, admin, key)
				select {
				case <-ctx.Done():
					cancelledAt, cause = time.Now(), context.Cause(ctx)
					return ctx.Err()
				case <-time.After(2 * ttl):
					return errors.New("the function was not cancelled within two leases")
				}
			})
			undo()
			if !errors.Is(cause, lock.ErrLeaseLost) || !errors.Is(err, lock.ErrLeaseLost) {
				t.Fatalf("cause %v, Do's error %v; want both to wrap ErrLeaseLost", cause, err)
			}
			lateness := <-late
			// The watchdog aims at the lease's end less a margin (TTL/20): it must
			// cancel before the lease ends, give or take the machine's lateness.
			if limit := end.Add(lateness); !cancelledAt.Before(limit.Add(ttl / 20)) {
				t.Fatalf("cancelled %s after the lease ended (this machine ran a timer %s late)", cancelledAt.Sub(end), lateness)
			}
			if got := metricValue(t, m, "test_lock_leases_lost_total", nil); got != 1 {
				t.Fatalf("leases lost metric %v, want 1", got)
			}
			t.Logf("cancelled %s after the call, cause: %v", cancelledAt.Sub(before).Round(time.Millisecond), cause)
		})
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

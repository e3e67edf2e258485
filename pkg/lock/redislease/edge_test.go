package redislease_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// A lease handed over for A is held, unrenewed, while the caller waits for B. If
// it runs out meanwhile and another process takes A, the caller must not run.
func TestLeaseHeldWhileWaitingIsRenewedBeforeTheWork(t *testing.T) {
	env := newRedis(t)
	const ttl = 300 * time.Millisecond
	m := lockprom.New("one")
	c1 := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: ttl, Metrics: m})
	c2 := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 5 * time.Second})
	admin := env.Client(t)
	keys := redislease.Keys{Namespace: env.Namespace}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bHeld, releaseB := make(chan struct{}), make(chan struct{})
	bErr := make(chan error, 1)
	go func() {
		bErr <- c2.Do(ctx, []string{"B"}, func(context.Context, *lock.Grant) error { close(bHeld); <-releaseB; return nil })
	}()
	<-bHeld

	ran := make(chan struct{}, 1)
	xErr := make(chan error, 1)
	err := c1.Do(ctx, []string{"A"}, func(context.Context, *lock.Grant) error {
		go func() {
			xErr <- c1.Do(ctx, []string{"A", "B"}, func(context.Context, *lock.Grant) error { ran <- struct{}{}; return nil })
		}()
		waitFor(ctx, t, func() bool { return metricValue(t, m, "one_lock_waiting", nil) == 1 })
		return nil // hands A's lease to X, which then waits for B
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, func() bool { return admin.Exists(ctx, keys.Lock("A")).Val() == 0 }) // A ran out
	aHeld, releaseA := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		aErr <- c2.Do(ctx, []string{"A"}, func(context.Context, *lock.Grant) error { close(aHeld); <-releaseA; return nil })
	}()
	<-aHeld
	close(releaseB) // X gets B now, while c2 holds A
	err = <-xErr
	close(releaseA)
	if err := errors.Join(<-aErr, <-bErr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
		t.Fatal("X ran its work while another process held A")
	default:
	}
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("X's error %v, want ErrLeaseLost", err)
	}
}

func TestPanicInTheWorkLeavesNoWatchdog(t *testing.T) {
	env := newRedis(t)
	c := newClient(t, env.Client(t), env.Namespace, nil)
	warm(t, c)
	defer noLeaks(t)()
	func() {
		defer func() { _ = recover() }()
		_ = c.Do(context.Background(), []string{"p"}, func(context.Context, *lock.Grant) error { panic("boom") })
	}()
	// The slot and the lease were given back: the next caller is served at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Do(ctx, []string{"p"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func TestWaitIsBoundedWhenRedisStalls(t *testing.T) {
	srv := startRedisServer(t)
	env := newRedisAt(t, srv.Addr)
	c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: time.Second})
	srv.Pause()
	defer srv.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Do(ctx, []string{"s"}, func(context.Context, *lock.Grant) error { return nil }) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("granted while Redis was stopped")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not return within 5s of a 200ms deadline while Redis was stopped")
	}
}

func TestWaitOptionBoundsOnlyTheWait(t *testing.T) {
	env := newRedis(t)
	a := newClient(t, env.Client(t), env.Namespace, nil)
	b := newClient(t, env.Client(t), env.Namespace, &lock.Options{Wait: 50 * time.Millisecond})
	ctx := context.Background()
	err := a.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
		err := b.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
		if !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("got %v, want ErrNotObtained after Wait", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Do(ctx, []string{"r"}, func(ctx context.Context, _ *lock.Grant) error {
		if _, ok := ctx.Deadline(); ok {
			return errors.New("the work inherited the wait's deadline")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A Redis that does not answer is ErrUnavailable, not ErrNotObtained: no owner
// held the resource. So for the callers queued behind the local caller that
// talks to it, and for a Redis that refuses connections.
func TestStalledRedisIsUnavailableNotBusy(t *testing.T) {
	srv := startRedisServer(t)
	env := newRedisAt(t, srv.Addr)
	c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: time.Second, Wait: 300 * time.Millisecond})
	srv.Pause()
	defer srv.Resume()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			errs <- c.Do(context.Background(), []string{"s"}, func(context.Context, *lock.Grant) error { return nil })
		}()
	}
	for range 3 {
		select {
		case err := <-errs:
			if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("Redis stopped: %v, want ErrUnavailable and not ErrNotObtained", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Do did not return within 10s of a 300ms wait while Redis was stopped")
		}
	}

	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: closed, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	c = newClient(t, rdb, env.Namespace, &lock.Options{TTL: time.Second, Wait: 300 * time.Millisecond})
	err = c.Do(context.Background(), []string{"s"}, func(context.Context, *lock.Grant) error { return nil })
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("nothing listening: %v, want ErrUnavailable and not ErrNotObtained", err)
	}
}

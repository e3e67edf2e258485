package redislease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func TestReleaseNeverRemovesAnotherHoldersLock(t *testing.T) {
	env := newRedis(t)
	a := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: time.Second})
	b := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 5 * time.Second})
	admin := env.Client(t)
	key := redislease.Keys{Namespace: env.Namespace}.Lock("r")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bHolds, bDone := make(chan struct{}), make(chan struct{})
	bErr := make(chan error, 1)
	var aToken, bToken int64
	err := a.Do(ctx, []string{"r"}, func(actx context.Context, g *lock.Grant) error {
		aToken = g.Token("r")
		mustDo(t, admin.PExpire(ctx, key, time.Millisecond).Err()) // A's lease ends under it
		go func() {
			bErr <- b.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error {
				bToken = g.Token("r")
				close(bHolds)
				<-bDone
				return nil
			})
		}()
		<-bHolds
		return nil // A returns while B holds: A's release must leave B's lock alone
	})
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := admin.PTTL(ctx, key).Result()
	if err != nil || ttl <= 0 {
		t.Fatalf("B's lock is gone after A's release (PTTL %v, %v)", ttl, err)
	}
	if _, err := redislock.New(admin).Obtain(ctx, key, time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("a third client obtained the lock B holds: %v", err)
	}
	close(bDone)
	if err := <-bErr; err != nil {
		t.Fatal(err)
	}
	if bToken <= aToken {
		t.Fatalf("B's token %d is not above A's %d", bToken, aToken)
	}
}

// A local waiter is handed the lease of a holder whose lock was taken over in
// Redis: it must get no token from that lease, wait for the new owner, and then
// get a token above the new owner's.
func TestHolderWhoseLeaseEndedGivesNoToken(t *testing.T) {
	env := newRedis(t)
	m := lockprom.New("a")
	a := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 5 * time.Second, Metrics: m, HandoffCheck: -1})
	b := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 5 * time.Second})
	admin := env.Client(t)
	key := redislease.Keys{Namespace: env.Namespace}.Lock("r")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	bHolds, bRelease := make(chan struct{}), make(chan struct{})
	var bToken, a2Token int64
	var bReleased atomic.Bool
	a2Err, bErr := make(chan error, 1), make(chan error, 1)
	err := a.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
		go func() {
			a2Err <- a.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error {
				if !bReleased.Load() {
					return errors.New("A2 ran while B held the lock")
				}
				a2Token = g.Token("r")
				return nil
			})
		}()
		waitFor(ctx, t, func() bool { return metricValue(t, m, "a_lock_waiting", nil) == 1 }) // A2 is queued
		mustDo(t, admin.Del(ctx, key).Err())                                                  // A's lease is gone; A does not know yet
		go func() {
			bErr <- b.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error {
				bToken = g.Token("r")
				close(bHolds)
				<-bRelease
				bReleased.Store(true)
				return nil
			})
		}()
		<-bHolds
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	close(bRelease)
	if err := errors.Join(<-bErr, <-a2Err); err != nil {
		t.Fatal(err)
	}
	if a2Token <= bToken {
		t.Fatalf("A2's token %d is not above B's %d", a2Token, bToken)
	}
	if got := metricValue(t, m, "a_lock_handoffs_total", map[string]string{"result": "refused"}); got != 1 {
		t.Fatalf("refused handoffs %v, want 1: the test did not hand A's lease to A2", got)
	}
}

func TestTokensGrowAcrossGrantsAndRestarts(t *testing.T) {
	srv := startRedisServer(t)
	env := newRedisAt(t, srv.Addr)
	// A long TTL: each call's deadline is a third of it, and the test is about
	// tokens, not about how fast a busy machine answers.
	c := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	token := func() int64 {
		var tok int64
		if err := c.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error { tok = g.Token("r"); return nil }); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	last := token()
	for range 5 {
		if next := token(); next <= last {
			t.Fatalf("token %d after %d", next, last)
		} else {
			last = next
		}
	}
	srv.Restart(t) // no persistence: the fence counter is gone with everything else
	var next int64
	for i := 0; ; i++ { // the client reconnects on its next command
		err := c.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error { next = g.Token("r"); return nil })
		if err == nil {
			break
		}
		if i == 3 {
			t.Fatalf("no grant after the restart: %v", err)
		}
	}
	if next <= last {
		t.Fatalf("token %d after a restart is not above %d from before it", next, last)
	}
}

func TestWaiterIsWokenByReleaseNotPoll(t *testing.T) {
	env := newRedis(t)
	slowMetrics := lockprom.New("b")
	slow := &lock.Options{MinPoll: time.Minute, MaxPoll: time.Minute, Metrics: slowMetrics}
	a := newClient(t, env.Client(t), env.Namespace, nil)
	b := newClient(t, env.Client(t), env.Namespace, slow)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // far under the poll
	defer cancel()

	bGot := make(chan error, 1)
	err := a.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
		go func() {
			bGot <- b.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
		}()
		// Release only once B has found the lock busy and is waiting.
		waitFor(ctx, t, func() bool {
			return metricValue(t, slowMetrics, "b_lock_obtain_attempts_total", map[string]string{"result": "busy"}) > 0
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-bGot; err != nil {
		t.Fatalf("B was not woken within the test's bound: %v", err)
	}
	byRelease := metricValue(t, slowMetrics, "b_lock_wakeups_total", map[string]string{"cause": "release"})
	byPoll := metricValue(t, slowMetrics, "b_lock_wakeups_total", map[string]string{"cause": "poll"})
	if byRelease != 1 || byPoll != 0 {
		t.Fatalf("wakeups: %v by release, %v by poll; want 1 and 0", byRelease, byPoll)
	}
}

func TestWaitIsBoundedByContext(t *testing.T) {
	env := newRedis(t)
	a := newClient(t, env.Client(t), env.Namespace, nil)
	b := newClient(t, env.Client(t), env.Namespace, nil)
	ctx := context.Background()
	ran := false
	err := a.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
		for _, c := range []*lock.Client{a, b} { // a queues locally, b waits in Redis
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := c.Do(short, []string{"r"}, func(context.Context, *lock.Grant) error { ran = true; return nil })
			cancel()
			if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want ErrNotObtained and DeadlineExceeded", err)
			}
		}
		return nil
	})
	if err != nil || ran {
		t.Fatalf("err %v, ran %v", err, ran)
	}
	// The queue is still usable after the timeouts.
	for _, c := range []*lock.Client{a, b} {
		if err := c.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMultiResourceGrantIsAllOrNothing(t *testing.T) {
	env := newRedis(t)
	a := newClient(t, env.Client(t), env.Namespace, nil)
	b := newClient(t, env.Client(t), env.Namespace, nil)
	admin := redislock.New(env.Client(t))
	keys := redislease.Keys{Namespace: env.Namespace}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	bGot := make(chan error, 1)
	err := a.Do(ctx, []string{"y"}, func(context.Context, *lock.Grant) error {
		go func() {
			bGot <- b.Do(ctx, []string{"y", "x"}, func(_ context.Context, g *lock.Grant) error {
				if g.Token("x") == 0 || g.Token("y") == 0 {
					return errors.New("a resource without a token")
				}
				return nil
			})
		}()
		// While B waits for y, it must hold nothing: x is free to take.
		waitFor(ctx, t, func() bool {
			lk, err := admin.Obtain(ctx, keys.Lock("x"), time.Second, nil)
			if err != nil {
				return false
			}
			_ = lk.Release(ctx)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-bGot; err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsOptionsThatCannotWork(t *testing.T) {
	env := newRedis(t)
	for _, o := range []lock.Options{
		{TTL: time.Millisecond},
		{TTL: time.Second, RenewEvery: time.Second},
		{TTL: time.Second, RenewEvery: 980 * time.Millisecond}, // no time left to retry a renewal
		{TTL: time.Second, MinPoll: time.Second, MaxPoll: time.Millisecond},
	} {
		if _, err := redislease.NewClient(env.Client(t), nil, &o); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%+v: got %v, want ErrInvalidOptions", o, err)
		}
	}
	c := newClient(t, env.Client(t), env.Namespace, nil)
	for _, names := range [][]string{nil, {""}, {"a{b"}} {
		err := c.Do(context.Background(), names, func(context.Context, *lock.Grant) error { return nil })
		if !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("%q: got %v, want ErrInvalidName", names, err)
		}
	}
}

// waitFor waits until cond holds, checking it every few milliseconds until ctx ends.
func waitFor(ctx context.Context, t testing.TB, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met before the deadline")
		case <-tick.C:
		}
	}
}

// A release is announced only when a try found the resource held since it was
// obtained: an uncontended lock sends no pub/sub message, a contended one one.
func TestOnlyAwaitedReleasesAreAnnounced(t *testing.T) {
	env := newRedis(t)
	a := newClient(t, env.Client(t), env.Namespace, nil)
	b := newClient(t, env.Client(t), env.Namespace, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ps := env.Client(t).Subscribe(ctx, redislease.Keys{Namespace: env.Namespace}.Channel())
	defer func() { _ = ps.Close() }()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *lock.Grant) error { return nil }
	for range 3 {
		mustDo(t, a.Do(ctx, []string{"quiet"}, noop))
	}
	bGot := make(chan error, 1)
	mustDo(t, a.Do(ctx, []string{"busy"}, func(context.Context, *lock.Grant) error {
		go func() { bGot <- b.Do(ctx, []string{"busy"}, noop) }()
		// B's try sets the mark; A's release then announces.
		waitFor(ctx, t, func() bool {
			n, err := env.Client(t).Exists(ctx, redislease.Keys{Namespace: env.Namespace}.Waiters("busy")).Result()
			return err == nil && n == 1
		})
		return nil
	}))
	mustDo(t, <-bGot)
	// The first message is the contended release: the three before sent none.
	m, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Payload != "busy" {
		t.Fatalf("first announcement: %q, want busy (the uncontended releases must announce nothing)", m.Payload)
	}
}

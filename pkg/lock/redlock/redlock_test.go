package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

func TestNewRejects(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = c.Close() }()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = cc.Close() }()
	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		opt     *redlock.Options
	}{
		{"none", nil, nil},
		{"two", []redis.UniversalClient{c, c}, nil},
		{"nil client", []redis.UniversalClient{c, nil, c}, nil},
		{"cluster client", []redis.UniversalClient{c, cc, c}, nil},
		{"negative drift", []redis.UniversalClient{c, c, c}, &redlock.Options{DriftFactor: -0.1}},
		{"drift of half", []redis.UniversalClient{c, c, c}, &redlock.Options{DriftFactor: 0.5}},
	} {
		if _, err := redlock.New(tc.clients, tc.opt); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%s: New = %v, want ErrInvalidOptions", tc.name, err)
		}
	}
	b, err := redlock.New([]redis.UniversalClient{c, c, c, c, c}, nil)
	if err != nil || b.Quorum() != 3 {
		t.Fatalf("five nodes: quorum %v, %v; want 3", b, err)
	}
}

// TestObtainOneNodeDown: a majority is enough; the dead node only costs its
// refused dial.
func TestObtainOneNodeDown(t *testing.T) {
	ns := startNodes(t, 3)
	ns.servers[2].Kill()
	b := ns.open(t)
	c, err := lock.NewClient(b, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var tokens []int64
	for range 3 {
		err := c.Do(opCtx(t), []string{"A"}, func(ctx context.Context, g *lock.Grant) error {
			tokens = append(tokens, g.Token("A"))
			held, err := b.Held(ctx, "A", "nobody")
			if err != nil || held {
				return fmt.Errorf("held by nobody: %v, %w", held, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, tok := range tokens {
		if tok <= 0 || (i > 0 && tok <= tokens[i-1]) {
			t.Fatalf("tokens %v: want positive and strictly increasing", tokens)
		}
	}
	for i := range 2 {
		if v := ns.lockValue(t, i, "A"); v != "" {
			t.Errorf("node %d still holds A (%q) after the releases", i, v)
		}
	}
}

// TestObtainTwoNodesUnreachable: without a reachable majority Obtain fails at
// once with ErrNoQuorum, not ErrBusy (so the Client does not wait), whether the
// nodes are dead (refused dials) or stalled (SIGSTOP: the read timeout).
func TestObtainTwoNodesUnreachable(t *testing.T) {
	for _, how := range []string{"killed", "paused"} {
		t.Run(how, func(t *testing.T) {
			ns := startNodes(t, 3)
			b := ns.open(t)
			for _, s := range ns.servers[1:] {
				if how == "killed" {
					s.Kill()
				} else {
					s.Pause()
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			// Bound: the read timeout (1s) for the obtain and again for its cleanup,
			// with room for a busy machine; far below the context's 30s.
			const bound = 8 * time.Second
			start := time.Now()
			_, err := b.Obtain(ctx, []string{"A"}, "v", 5*time.Second, 1)
			took := time.Since(start)
			if !errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, lock.ErrBusy) {
				t.Fatalf("Obtain = %v, want ErrNoQuorum and not ErrBusy", err)
			}
			if took > bound {
				t.Fatalf("Obtain took %s, want under %s", took, bound)
			}
			if v := ns.lockValue(t, 0, "A"); v != "" {
				t.Errorf("the failed obtain left its lock on the live node: %q", v)
			}

			c, err := lock.NewClient(b, &lock.Options{TTL: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			start = time.Now()
			err = c.Do(ctx, []string{"A"}, func(context.Context, *lock.Grant) error { return errors.New("ran without a majority") })
			took = time.Since(start)
			if !errors.Is(err, redlock.ErrNoQuorum) || took > 2*bound {
				t.Fatalf("Do = %v after %s, want ErrNoQuorum within %s", err, took, 2*bound)
			}

			if err := b.Renew(ctx, []string{"A"}, "v", 5*time.Second); !errors.Is(err, redlock.ErrNoQuorum) || errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Renew = %v, want ErrNoQuorum and not ErrNotHeld", err)
			}
			if _, err := b.Held(ctx, "A", "v"); !errors.Is(err, redlock.ErrNoQuorum) {
				t.Errorf("Held = %v, want ErrNoQuorum", err)
			}
		})
	}
}

// TestMutualExclusion: several Clients, each on its own connections as separate
// processes, increment a shared counter by read, yield, write under one lock;
// one caller at a time, no update lost, and the tokens seen in the critical
// sections strictly increase.
func TestMutualExclusion(t *testing.T) {
	ns := startNodes(t, 3)
	const clients, workers, rounds = 4, 3, 8
	var inside, overlaps, shared atomic.Int64
	var mu sync.Mutex
	var tokens []int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*workers)
	for range clients {
		c, err := lock.NewClient(ns.open(t), &lock.Options{TTL: 5 * time.Second, MaxHandoffs: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		for range workers {
			wg.Go(func() {
				for range rounds {
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
					err := c.Do(ctx, []string{"hot"}, func(_ context.Context, g *lock.Grant) error {
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						defer inside.Add(-1)
						v := shared.Load()
						runtime.Gosched()
						time.Sleep(time.Millisecond) // work under the lock, to widen any overlap
						shared.Store(v + 1)
						mu.Lock()
						tokens = append(tokens, g.Token("hot"))
						mu.Unlock()
						return nil
					})
					cancel()
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d critical sections overlapped", n)
	}
	if got, want := shared.Load(), int64(clients*workers*rounds); got != want {
		t.Errorf("counter %d, want %d: updates were lost", got, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d of section %d is not above %d of the one before", tokens[i], i, tokens[i-1])
		}
	}
}

// TestMultiResourceExclusion: overlapping sets of names, all or none per node,
// under contention: per resource, one holder at a time.
func TestMultiResourceExclusion(t *testing.T) {
	ns := startNodes(t, 3)
	sets := [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"a"}}
	var inside [3]atomic.Int64 // a, b, c
	var overlaps, done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(sets))
	for _, set := range sets {
		c, err := lock.NewClient(ns.open(t), &lock.Options{TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close() }()
		wg.Go(func() {
			for range 8 {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				err := c.Do(ctx, set, func(context.Context, *lock.Grant) error {
					for _, n := range set {
						if inside[n[0]-'a'].Add(1) != 1 {
							overlaps.Add(1)
						}
					}
					time.Sleep(time.Millisecond) // work under the lock, to widen any overlap
					for _, n := range set {
						inside[n[0]-'a'].Add(-1)
					}
					done.Add(1)
					return nil
				})
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlaps.Load() != 0 || done.Load() != int64(8*len(sets)) {
		t.Fatalf("%d overlaps, %d sections done; want 0 and %d", overlaps.Load(), done.Load(), 8*len(sets))
	}
}

// TestTokensMonotonicCounterexample: the counters 100, 50, 50 that break "the
// largest of each node's own incremented counter over the majority" (grant on
// nodes 1 and 2 gets 101, the next on 2 and 3 gets 51). Here the majority's
// top is written on every granting node, so the second grant is above the
// first. The counters are primed far above the nodes' clocks, so the hybrid
// clock cannot hide a wrong order.
func TestTokensMonotonicCounterexample(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.open(t)
	const x = int64(4_000_000_000_000_000) // µs: year 2096, above any clock, exact in Lua's doubles
	const block = 5
	ns.setCounter(t, 0, "R", x+100)
	ns.setCounter(t, 1, "R", x+50)
	ns.setCounter(t, 2, "R", x+50)

	ns.block(t, 2, "R") // grant on nodes 1 and 2
	tops, err := b.Obtain(opCtx(t), []string{"R"}, "v1", 30*time.Second, block)
	if err != nil {
		t.Fatal(err)
	}
	t1 := tops[0]
	if t1 != x+100+block {
		t.Fatalf("first top %d, want %d (node 1's counter + block)", t1, x+100+block)
	}
	if err := b.Release(opCtx(t), []string{"R"}, "v1"); err != nil {
		t.Fatal(err)
	}
	ns.unblock(t, 2, "R")

	ns.block(t, 0, "R") // grant on nodes 2 and 3
	tops, err = b.Obtain(opCtx(t), []string{"R"}, "v2", 30*time.Second, block)
	if err != nil {
		t.Fatal(err)
	}
	t2 := tops[0]
	if lowest := t2 - block + 1; lowest <= t1 {
		t.Fatalf("second grant's tokens %d..%d are not above the first's top %d (a per-node scheme would give %d)",
			lowest, t2, t1, x+51)
	}
	for i := 1; i < 3; i++ {
		if c := ns.counter(t, i, "R"); c != t2 {
			t.Errorf("node %d counter %d, want the grant's top %d", i+1, c, t2)
		}
	}
}

// TestTokensAfterRestart: nodes restarted empty, within and beyond what the
// package documentation claims.
func TestTokensAfterRestart(t *testing.T) {
	const x = int64(4_000_000_000_000_000) // counters ahead of every clock: only counters can order tokens

	t.Run("one of three that recorded the grant", func(t *testing.T) {
		ns := startNodes(t, 3)
		b := ns.open(t)
		for i := range 3 {
			ns.setCounter(t, i, "R", x)
		}
		t1 := obtainEventually(t, b, "R", "v1", 1) // on all three
		if err := b.Release(opCtx(t), []string{"R"}, "v1"); err != nil {
			t.Fatal(err)
		}
		ns.servers[0].Restart(t)
		ns.block(t, 1, "R") // the next majority is the restarted node and node 3
		if t2 := obtainEventually(t, b, "R", "v2", 1); t2 <= t1 {
			t.Fatalf("token %d after the restart is not above %d", t2, t1)
		}
	})

	t.Run("a majority, counters at the clocks", func(t *testing.T) {
		ns := startNodes(t, 3)
		b := ns.open(t)
		ns.block(t, 2, "R")
		t1 := obtainEventually(t, b, "R", "v1", 1) // on nodes 1 and 2, at their clocks
		if err := b.Release(opCtx(t), []string{"R"}, "v1"); err != nil {
			t.Fatal(err)
		}
		ns.servers[0].Restart(t) // both nodes that recorded it lose it
		ns.servers[1].Restart(t)
		if t2 := obtainEventually(t, b, "R", "v2", 1); t2 <= t1 {
			t.Fatalf("token %d after the restarts is not above %d: the clocks should cover the loss", t2, t1)
		}
	})

	t.Run("beyond the claim: the fence and Advance", func(t *testing.T) {
		// The documented failure: the grant recorded on nodes 1 and 2 only, counters
		// ahead of the clocks, node 1 restarts, the next majority is nodes 1 and 3.
		ns := startNodes(t, 3)
		b := ns.open(t)
		ns.setCounter(t, 0, "R", x)
		ns.setCounter(t, 1, "R", x)
		ns.setCounter(t, 2, "R", x-1000)
		ns.block(t, 2, "R")
		t1 := obtainEventually(t, b, "R", "v1", 1)
		if err := b.Release(opCtx(t), []string{"R"}, "v1"); err != nil {
			t.Fatal(err)
		}
		ns.unblock(t, 2, "R")
		ns.servers[0].Restart(t)
		ns.block(t, 1, "R")
		t2 := obtainEventually(t, b, "R", "v2", 1)
		if t2 > t1 {
			t.Fatalf("token %d grew past %d where the documentation says it cannot: update the documentation", t2, t1)
		}
		// The store refuses t2 (it has accepted t1); the holder advances past t1.
		if _, err := b.Advance(opCtx(t), "R", "v1", t1); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Advance by the old holder = %v, want ErrNotHeld", err)
		}
		n, err := b.Advance(opCtx(t), "R", "v2", t1)
		if err != nil {
			t.Fatal(err)
		}
		if n <= t1 {
			t.Fatalf("Advance returned %d, not above %d", n, t1)
		}
		if err := b.Release(opCtx(t), []string{"R"}, "v2"); err != nil {
			t.Fatal(err)
		}
		ns.unblock(t, 1, "R")
		ns.block(t, 0, "R") // a majority that does not include the restarted node's
		if t3 := obtainEventually(t, b, "R", "v3", 1); t3 <= n {
			t.Fatalf("token %d after Advance's %d", t3, n)
		}
	})
}

// TestNonHolder: Release, Renew and Advance under another value change nothing.
func TestNonHolder(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.open(t)
	ctx := opCtx(t)
	if _, err := b.Obtain(ctx, []string{"A", "B"}, "owner", 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"A", "B"}, "intruder"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"A", "B"} {
		if held, err := b.Held(ctx, name, "owner"); err != nil || !held {
			t.Fatalf("Held(%s, owner) = %v, %v after the intruder's release", name, held, err)
		}
		for i := range 3 {
			if v := ns.lockValue(t, i, name); v != "owner" {
				t.Errorf("node %d: %s = %q, want owner", i+1, name, v)
			}
		}
	}
	if _, err := b.Obtain(ctx, []string{"B"}, "intruder", 30*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Errorf("Obtain by another = %v, want ErrBusy", err)
	}
	if err := b.Renew(ctx, []string{"A"}, "intruder", 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Renew by another = %v, want ErrNotHeld", err)
	}
	if _, err := b.Advance(ctx, "A", "intruder", 1); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Advance by another = %v, want ErrNotHeld", err)
	}
	if err := b.Renew(ctx, []string{"A", "B"}, "owner", 30*time.Second); err != nil {
		t.Errorf("Renew by the owner = %v", err)
	}
	if err := b.Release(ctx, []string{"A", "B"}, "owner"); err != nil {
		t.Fatal(err)
	}
	if held, err := b.Held(ctx, "A", "owner"); err != nil || held {
		t.Fatalf("Held after the owner's release = %v, %v", held, err)
	}
}

// TestAllOrNone: a call over several names that finds one held on a majority
// is refused and leaves none of the others set.
func TestAllOrNone(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.open(t)
	ns.block(t, 0, "B")
	ns.block(t, 1, "B")
	if _, err := b.Obtain(opCtx(t), []string{"A", "B"}, "v", 30*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("Obtain = %v, want ErrBusy", err)
	}
	for i := range 3 {
		if v := ns.lockValue(t, i, "A"); v != "" {
			t.Errorf("node %d keeps A = %q after the refused obtain", i+1, v)
		}
	}
}

// TestRenewMajority: a renewal needs a majority that still holds the value.
func TestRenewMajority(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.open(t)
	ctx := opCtx(t)
	if _, err := b.Obtain(ctx, []string{"A"}, "v", 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	ns.unblock(t, 0, "A") // node 1 loses it: a majority is left
	if err := b.Renew(ctx, []string{"A"}, "v", 30*time.Second); err != nil {
		t.Fatalf("Renew with two of three = %v", err)
	}
	ns.unblock(t, 1, "A") // node 2 too: no majority
	if err := b.Renew(ctx, []string{"A"}, "v", 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Renew with one of three = %v, want ErrNotHeld", err)
	}
	if held, err := b.Held(ctx, "A", "v"); err != nil || held {
		t.Fatalf("Held with one of three = %v, %v", held, err)
	}
}

// TestObtainTooSlow: a majority that grants later than the validity does not
// make a grant: Obtain fails with ErrBusy and releases what it set. A paused
// third node holds phase 1 for the 1s read timeout; with DriftFactor 0.45 and a
// 1.8s TTL the validity is under 1s while the locks set live on for phase 2.
func TestObtainTooSlow(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.openWith(t, &redlock.Options{Keys: ns.keys, DriftFactor: 0.45})
	ns.servers[2].Pause()
	_, err := b.Obtain(opCtx(t), []string{"A"}, "v", 1800*time.Millisecond, 1)
	if !errors.Is(err, lock.ErrBusy) || !strings.Contains(err.Error(), "validity") {
		t.Fatalf("Obtain = %v, want ErrBusy for a grant past the validity", err)
	}
	ns.servers[2].Resume()
	for i := range 3 {
		if v := ns.lockValue(t, i, "A"); v == "v" {
			t.Errorf("node %d keeps the too-late lock", i+1)
		}
	}
}

// TestReleaseAnnounced: a release that a refused try awaited is announced on
// every node that had the mark; an uncontended one is not announced.
func TestReleaseAnnounced(t *testing.T) {
	ns := startNodes(t, 3)
	b := ns.open(t)
	ctx := opCtx(t)
	names, stop, err := b.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()

	if _, err := b.Obtain(ctx, []string{"quiet"}, "v", 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"quiet"}, "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, []string{"busy"}, "v", 30*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, []string{"busy"}, "w", 30*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("contended Obtain = %v, want ErrBusy", err)
	}
	if err := b.Release(ctx, []string{"busy"}, "v"); err != nil {
		t.Fatal(err)
	}
	// Each node delivers in order: once "busy" came from all three, any
	// announcement of "quiet" (published before it) has come too.
	var got []string
	for busy := 0; busy < 3; {
		select {
		case n, ok := <-names:
			if !ok {
				t.Fatalf("channel closed after %v", got)
			}
			got = append(got, n)
			if n == "busy" {
				busy++
			}
		case <-ctx.Done():
			t.Fatalf("got %v before the deadline, want busy from three nodes", got)
		}
	}
	if slices.Contains(got, "quiet") {
		t.Fatalf("an uncontended release was announced: %v", got)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for range 100 { // stop closes the channel; what was buffered may come first
		if _, ok := <-names; !ok {
			return
		}
	}
	t.Fatal("the channel is still open after stop")
}

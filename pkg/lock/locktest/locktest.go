// Package locktest is the conformance suite of lock.Backend: the promises every
// lock service behind a lock.Client must keep, checked on a real server. A
// Backend's own tests call Run with a Harness that opens it.
//
// The suite checks mutual exclusion under contention from several processes
// (a shared counter that a race would break), fencing tokens that strictly
// increase per resource across grants (and across a restart of the lock
// service where the Backend claims it), all-or-none multi-resource obtains,
// renewals and releases of several names at once, a crashed holder's lease
// freed within its TTL, a long holder kept by the watchdog, the work cancelled
// when the lease is lost (the service paused), release, renewal and advance by
// a non-holder refused, and multi-resource acquisition from several processes
// without deadlock.
package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Harness opens the Backend under test.
type Harness struct {
	// Space returns a fresh, isolated lock space (a key namespace, a table) and a
	// function that opens a Backend on it as a new process would (connections of
	// its own); open may be called several times. Both clean up with t.
	Space func(t testing.TB) (open func(t testing.TB) lock.Backend)

	// Pause suspends the lock service (enough of it that no lease can be
	// renewed: for Redlock a majority) and returns a function that resumes it;
	// nil skips the test that needs it.
	Pause func(t testing.TB) (resume func())

	// Restart restarts the lock service, losing what it did not persist; nil
	// skips the test that needs it.
	Restart func(t testing.TB)

	// TokensSurviveRestart says the Backend claims its tokens keep growing
	// across Restart; without it the test only reports what happened.
	TokensSurviveRestart bool

	// MinTTL, when above the suite's short TTLs (600ms and 1s), is the TTL the
	// tests of the watchdog and of a lost lease use instead: the least lease
	// the Backend's calls can obtain and renew within (a Client's OpTimeout and
	// renewal window are fractions of its TTL) on a busy machine, given how
	// long its client library waits on a slow server before it tries another.
	MinTTL time.Duration
}

// ttl is the suite's TTL d, raised to the Backend's MinTTL.
func (h Harness) ttl(d time.Duration) time.Duration { return max(d, h.MinTTL) }

// Run runs every test of the suite as a subtest of t.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"MutualExclusion", mutualExclusion},
		{"TokensIncrease", tokensIncrease},
		{"AllOrNone", allOrNone},
		{"ManyNamesAtOnce", manyNamesAtOnce},
		{"NonHolderRefused", nonHolderRefused},
		{"AdvanceAbovePast", advanceAbovePast},
		{"CrashedHolderFreedWithinTTL", crashedHolderFreed},
		{"WatchdogKeepsLongHolder", watchdogKeepsLongHolder},
		{"LeaseLostCancelsWork", leaseLostCancelsWork},
		{"MultiResourceNoDeadlock", multiResourceNoDeadlock},
		{"TokensAcrossRestart", tokensAcrossRestart},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

// client opens a Backend on the space and a lock.Client over it: one process.
func client(t testing.TB, open func(testing.TB) lock.Backend, opt lock.Options) *lock.Client {
	t.Helper()
	c, err := lock.NewClient(open(t), &opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// value returns a random owner value, as a Client makes them.
func value(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// holdCheck detects overlapping holds of one resource, lost updates of a value
// updated without atomicity, and tokens not above the previous holder's.
type holdCheck struct {
	mu                          sync.Mutex // guards last only
	last                        int64
	inside, overlaps, value     atomic.Int64
	tokenDrops, holdsWithTokens atomic.Int64
}

func (h *holdCheck) hold(token int64) {
	if h.inside.Add(1) != 1 {
		h.overlaps.Add(1)
	}
	h.mu.Lock()
	if token <= h.last {
		h.tokenDrops.Add(1)
	}
	h.last = token
	h.mu.Unlock()
	h.holdsWithTokens.Add(1)
	v := h.value.Load() // read, yield, write: updates are lost unless the lock holds
	time.Sleep(time.Microsecond)
	h.value.Store(v + 1)
	h.inside.Add(-1)
}

// mutualExclusion: 3 processes × 8 goroutines on overlapping sets; a shared
// counter per resource, updated without atomicity, must count every hold, no
// two holds may overlap, and each holder's token must be above the previous.
func mutualExclusion(t *testing.T, h Harness) {
	open := h.Space(t)
	const clients, goroutines, rounds = 3, 8, 15
	sets := [][]string{{"a"}, {"a", "b"}, {"b", "a"}, {"b"}, {"c", "a"}}
	checks := map[string]*holdCheck{"a": {}, "b": {}, "c": {}}
	want := map[string]int64{}
	var cs []*lock.Client
	for range clients {
		cs = append(cs, client(t, open, lock.Options{TTL: 5 * time.Second, MaxHandoffs: 4}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for i := range clients * goroutines {
		names := sets[i%len(sets)]
		for _, n := range names {
			want[n] += rounds
		}
		wg.Go(func() {
			for range rounds {
				err := cs[i%clients].Do(ctx, names, func(_ context.Context, g *lock.Grant) error {
					for _, n := range g.Names() {
						checks[n].hold(g.Token(n))
					}
					return nil
				})
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
		t.Fatal(err)
	}
	for n, c := range checks {
		if c.value.Load() != want[n] || c.overlaps.Load() != 0 || c.tokenDrops.Load() != 0 {
			t.Errorf("%s: counter %d, want %d; %d overlapping holds; %d tokens not above the previous holder's",
				n, c.value.Load(), want[n], c.overlaps.Load(), c.tokenDrops.Load())
		}
	}
}

// tokensIncrease: grants taken in turn by different processes, and one
// obtained directly from the Backend, carry strictly increasing tokens.
func tokensIncrease(t *testing.T, h Harness) {
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := []*lock.Client{
		client(t, open, lock.Options{TTL: 5 * time.Second}),
		client(t, open, lock.Options{TTL: 5 * time.Second}),
	}
	var last int64
	for i := range 20 {
		var tok int64
		err := cs[i%2].Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error { tok = g.Token("r"); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if tok <= last {
			t.Fatalf("grant %d: token %d, not above the previous %d", i, tok, last)
		}
		last = tok
	}
	b, v := open(t), value(t)
	tops, err := b.Obtain(ctx, []string{"r"}, v, 5*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(tops) != 1 || tops[0]-2 <= last {
		t.Fatalf("a block of 3 tokens with top %v after token %d: its first is not above", tops, last)
	}
	if err := b.Release(ctx, []string{"r"}, v); err != nil {
		t.Fatal(err)
	}
}

// allOrNone: an obtain of a and b while b is held gets neither.
func allOrNone(t *testing.T, h Harness) {
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := open(t)
	holder, other := value(t), value(t)
	if _, err := b.Obtain(ctx, []string{"b"}, holder, 10*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, []string{"a", "b"}, other, 10*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain of a and b while b is held: %v, want ErrBusy", err)
	}
	if held, err := b.Held(ctx, "a", other); err != nil || held {
		t.Fatalf("a is held by the refused obtain (%v, %v): it must take none", held, err)
	}
	third := value(t)
	if _, err := b.Obtain(ctx, []string{"a"}, third, 10*time.Second, 1); err != nil {
		t.Fatalf("a is not free after the refused obtain of a and b: %v", err)
	}
	for _, r := range []struct {
		name, v string
	}{{"a", third}, {"b", holder}} {
		if err := b.Release(ctx, []string{r.name}, r.v); err != nil {
			t.Fatal(err)
		}
	}
}

// manyNamesAtOnce: each call on a lease of several names acts on all of them,
// whatever the Backend does inside (one transaction or a call per name). An
// obtain of five names while another process holds the middle one takes none,
// and the holder keeps it; an obtain of five free names grants them all, with
// a block of tokens each; a renewal after one of them was lost (released,
// then taken by another process) fails with ErrNotHeld and leaves the new
// holder alone; a release frees the others and leaves that one to its holder.
func manyNamesAtOnce(t *testing.T, h Harness) {
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 10 * time.Second
	b, b2 := open(t), open(t)
	names := []string{"m1", "m2", "m3", "m4", "m5"}
	mustFree := func(ns []string) { // another process can obtain them all at once
		t.Helper()
		probe := value(t)
		if _, err := b2.Obtain(ctx, ns, probe, ttl, 1); err != nil {
			t.Fatalf("%q are not all free: %v", ns, err)
		}
		if err := b2.Release(ctx, ns, probe); err != nil {
			t.Fatal(err)
		}
	}

	holder := value(t)
	if _, err := b2.Obtain(ctx, names[2:3], holder, ttl, 1); err != nil {
		t.Fatal(err)
	}
	refused := value(t)
	if _, err := b.Obtain(ctx, names, refused, ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain of %q while %s is held: %v, want ErrBusy", names, names[2], err)
	}
	for _, n := range names {
		if held, err := b.Held(ctx, n, refused); err != nil || held {
			t.Fatalf("%s is held by the refused obtain (%v, %v): it must take none", n, held, err)
		}
	}
	if held, err := b2.Held(ctx, names[2], holder); err != nil || !held {
		t.Fatalf("the holder lost %s to a refused obtain (%v, %v)", names[2], held, err)
	}
	mustFree([]string{names[0], names[1], names[3], names[4]})
	if err := b2.Release(ctx, names[2:3], holder); err != nil {
		t.Fatal(err)
	}

	v := value(t)
	tops, err := b.Obtain(ctx, names, v, ttl, 3)
	if err != nil {
		t.Fatalf("obtain of %d free names: %v", len(names), err)
	}
	if len(tops) != len(names) {
		t.Fatalf("obtain of %d names: %d tokens", len(names), len(tops))
	}
	for i, n := range names {
		if held, err := b.Held(ctx, n, v); err != nil || !held {
			t.Fatalf("%s is not held after the obtain of %q (%v, %v)", n, names, held, err)
		}
		if _, err := b2.Obtain(ctx, []string{n}, value(t), ttl, 1); !errors.Is(err, lock.ErrBusy) {
			t.Fatalf("another process's obtain of %s after it was granted: %v, want ErrBusy", n, err)
		}
		if tops[i]-2 < 1 {
			t.Fatalf("%s: a block of 3 tokens with top %d: tokens start at 1", n, tops[i])
		}
	}
	if err := b.Renew(ctx, names, v, ttl); err != nil {
		t.Fatalf("renewal of %d held names: %v", len(names), err)
	}

	// m4 lost: released, and taken by another process.
	if err := b.Release(ctx, names[3:4], v); err != nil {
		t.Fatal(err)
	}
	taker := value(t)
	if _, err := b2.Obtain(ctx, names[3:4], taker, ttl, 1); err != nil {
		t.Fatalf("%s after its release by the holder of all five: %v", names[3], err)
	}
	if err := b.Renew(ctx, names, v, ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renewal of %q with %s lost: %v, want ErrNotHeld", names, names[3], err)
	}
	if held, err := b2.Held(ctx, names[3], taker); err != nil || !held {
		t.Fatalf("the new holder lost %s to the refused renewal (%v, %v)", names[3], held, err)
	}
	if err := b.Release(ctx, names, v); err != nil {
		t.Fatalf("release of %q: %v", names, err)
	}
	for _, n := range names {
		if held, err := b.Held(ctx, n, v); err != nil || held {
			t.Fatalf("%s is still held after the release of %q (%v, %v)", n, names, held, err)
		}
	}
	if held, err := b2.Held(ctx, names[3], taker); err != nil || !held {
		t.Fatalf("the release of %q took %s from its new holder (%v, %v)", names, names[3], held, err)
	}
	mustFree([]string{names[0], names[1], names[2], names[4]})
	if err := b2.Release(ctx, names[3:4], taker); err != nil {
		t.Fatal(err)
	}
}

// nonHolderRefused: Release, Renew, Advance and Held under another value leave
// the holder's lease alone.
func nonHolderRefused(t *testing.T, h Harness) {
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, b2 := open(t), open(t)
	holder, intruder := value(t), value(t)
	tops, err := b.Obtain(ctx, []string{"r"}, holder, 10*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Release(ctx, []string{"r"}, intruder); err != nil {
		t.Fatalf("release by a non-holder: %v (it must change nothing, quietly)", err)
	}
	if held, err := b.Held(ctx, "r", holder); err != nil || !held {
		t.Fatalf("the holder's lease is gone after a non-holder's release (%v, %v)", held, err)
	}
	if held, err := b2.Held(ctx, "r", intruder); err != nil || held {
		t.Fatalf("Held under a non-holder's value: %v, %v; want false", held, err)
	}
	if err := b2.Renew(ctx, []string{"r"}, intruder, 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by a non-holder: %v, want ErrNotHeld", err)
	}
	if _, err := b2.Advance(ctx, "r", intruder, tops[0]+1000); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("advance by a non-holder: %v, want ErrNotHeld", err)
	}
	if _, err := b2.Obtain(ctx, []string{"r"}, intruder, 10*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while held: %v, want ErrBusy", err)
	}
	if err := b.Release(ctx, []string{"r"}, holder); err != nil {
		t.Fatal(err)
	}
	if held, err := b.Held(ctx, "r", holder); err != nil || held {
		t.Fatalf("held after its holder's release: %v, %v", held, err)
	}
	if err := b.Renew(ctx, []string{"r"}, holder, 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew after release: %v, want ErrNotHeld", err)
	}
}

// advanceAbovePast: the holder's Advance returns a token above the one the
// store has, and the next grant's tokens are above that.
func advanceAbovePast(t *testing.T, h Harness) {
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, open, lock.Options{TTL: 5 * time.Second})
	var advanced int64
	err := c.Do(ctx, []string{"r"}, func(ctx context.Context, g *lock.Grant) error {
		past := g.Token("r") + 1_000_000
		n, err := g.Advance(ctx, "r", past)
		if err != nil {
			return err
		}
		if n <= past || g.Token("r") != n {
			return fmt.Errorf("advance past %d gave %d (grant's token %d)", past, n, g.Token("r"))
		}
		advanced = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error {
		if g.Token("r") <= advanced {
			return fmt.Errorf("the next grant's token %d is not above the advanced %d", g.Token("r"), advanced)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// crashedHolderFreed: a lease nobody renews or releases (its holder crashed)
// keeps the resource until its TTL, then frees it: a waiter gets it after the
// TTL and within the TTL plus slack for a loaded machine.
func crashedHolderFreed(t *testing.T, h Harness) {
	open := h.Space(t)
	const ttl = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	crashed := open(t)
	sent := time.Now()
	if _, err := crashed.Obtain(ctx, []string{"r"}, value(t), ttl, 1); err != nil {
		t.Fatal(err)
	}
	c := client(t, open, lock.Options{TTL: 5 * time.Second, MaxPoll: 50 * time.Millisecond})
	err := c.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got := time.Since(sent)
	// The service's clock may run a little ahead of ours: allow 10%.
	if got < ttl*9/10 {
		t.Fatalf("the crashed holder's lease of %s was taken over after %s: before it ended", ttl, got)
	}
	if slack := 10 * time.Second; got > ttl+slack {
		t.Fatalf("the crashed holder's lease of %s was freed only after %s", ttl, got)
	}
	t.Logf("freed %s after the crashed holder's obtain (TTL %s)", got.Round(time.Millisecond), ttl)
}

// watchdogKeepsLongHolder: work lasting three TTLs keeps its lease: not
// cancelled, and another process cannot obtain the resource meanwhile. What
// is checked is the lease once held: an obtain that fails before the work
// starts because the Backend did not answer (a connection dropped on a
// loaded machine) is tried again, up to three times, and a probe by the other
// process that fails that way grants nothing and is not counted.
func watchdogKeepsLongHolder(t *testing.T, h Harness) {
	open := h.Space(t)
	ttl := h.ttl(600 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client(t, open, lock.Options{TTL: ttl})
	other := open(t)
	tries := 0
	work := func(wctx context.Context, _ *lock.Grant) error {
		end := time.Now().Add(3 * ttl)
		for time.Now().Before(end) {
			v := value(t)
			_, err := other.Obtain(ctx, []string{"r"}, v, ttl, 1)
			switch {
			case err == nil:
				_ = other.Release(context.WithoutCancel(ctx), []string{"r"}, v)
				return errors.New("another process obtained the resource while the work runs")
			case errors.Is(err, lock.ErrBusy):
				tries++
			default:
				t.Logf("the other process's obtain failed (no grant): %v", err)
			}
			select {
			case <-wctx.Done():
				return fmt.Errorf("the work was cancelled: %w", context.Cause(wctx))
			case <-time.After(ttl / 4):
			}
		}
		return nil
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		started := false
		err = c.Do(ctx, []string{"r"}, func(wctx context.Context, g *lock.Grant) error {
			started = true
			return work(wctx, g)
		})
		if started || !errors.Is(err, lock.ErrUnavailable) {
			break
		}
		t.Logf("obtain %d failed before the work started: %v", attempt, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if tries < 4 {
		t.Fatalf("only %d tries while the work ran", tries)
	}
}

// leaseLostCancelsWork: with the lock service paused, the watchdog cannot
// renew, and the work's context is cancelled with ErrLeaseLost, before the
// lease could have ended give or take a loaded machine's lateness.
func leaseLostCancelsWork(t *testing.T, h Harness) {
	if h.Pause == nil {
		t.Skip("the harness cannot pause this lock service")
	}
	open := h.Space(t)
	ttl := h.ttl(time.Second)
	c := client(t, open, lock.Options{TTL: ttl, OpTimeout: ttl / 4})
	warm := func() error {
		return c.Do(context.Background(), []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
	}
	if err := warm(); err != nil {
		t.Fatal(err)
	}
	var resume func()
	defer func() {
		if resume != nil {
			resume()
		}
	}()
	start := time.Now()
	var cancelledAfter time.Duration
	err := c.Do(context.Background(), []string{"r"}, func(ctx context.Context, _ *lock.Grant) error {
		resume = h.Pause(t)
		select {
		case <-ctx.Done():
			cancelledAfter = time.Since(start)
			return context.Cause(ctx)
		case <-time.After(ttl + 20*time.Second):
			return errors.New("the work was not cancelled while the lock service was paused")
		}
	})
	if !errors.Is(err, lock.ErrLeaseLost) {
		t.Fatalf("Do: %v, want ErrLeaseLost", err)
	}
	// The watchdog cancels at the lease's end less its margin; a loaded machine
	// runs timers late, by far less than a second.
	if cancelledAfter > ttl+time.Second {
		t.Fatalf("cancelled %s after the grant, with a lease of %s", cancelledAfter, ttl)
	}
	resume()
	resume = nil
	// The service back, the lock works again within 30s. A service that was
	// resumed may still be recovering (an ensemble's majority electing a
	// leader): unanswered calls (ErrUnavailable) are tried again until then;
	// any other failure fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := c.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("after resume: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("cancelled %s after the grant (lease %s)", cancelledAfter.Round(time.Millisecond), ttl)
}

// multiResourceNoDeadlock: processes take overlapping sets given in every
// order; all finish within the test's bound.
func multiResourceNoDeadlock(t *testing.T, h Harness) {
	open := h.Space(t)
	names := []string{"p", "q", "r", "s"}
	var cs []*lock.Client
	for range 3 {
		cs = append(cs, client(t, open, lock.Options{TTL: 5 * time.Second}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var done atomic.Int64
	errs := make(chan error, 24)
	for i := range 24 {
		wg.Go(func() {
			for j := range 8 {
				set := []string{names[(i+j)%4], names[(i+2*j+1)%4], names[(3*i+j+2)%4]}
				if i%2 == 1 {
					slices.Reverse(set)
				}
				if err := cs[i%3].Do(ctx, set, func(context.Context, *lock.Grant) error { return nil }); err != nil {
					errs <- fmt.Errorf("set %v: %w", set, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if done.Load() != 24*8 {
		t.Fatalf("%d of %d grants", done.Load(), 24*8)
	}
}

// tokensAcrossRestart: a grant after the lock service restarted carries a
// token above the grants before, where the Backend claims it.
func tokensAcrossRestart(t *testing.T, h Harness) {
	if h.Restart == nil {
		t.Skip("the harness cannot restart this lock service")
	}
	open := h.Space(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := open(t)
	v := value(t)
	before, err := b.Obtain(ctx, []string{"r"}, v, 5*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"r"}, v); err != nil {
		t.Fatal(err)
	}
	h.Restart(t)
	c := client(t, open, lock.Options{TTL: 5 * time.Second})
	var after int64
	err = c.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error { after = g.Token("r"); return nil })
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case after > before[0]:
		t.Logf("token %d before the restart, %d after", before[0], after)
	case h.TokensSurviveRestart:
		t.Fatalf("token %d after the restart, not above %d before", after, before[0])
	default:
		t.Logf("token %d after the restart, not above %d before: the Backend does not claim it", after, before[0])
	}
}

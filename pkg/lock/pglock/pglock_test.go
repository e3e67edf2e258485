package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/pglock"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Several Clients, each on a Backend and pool of its own, share a counter under
// contention: no two hold the lock at once, no update is lost, and every grant's
// token is above the one before.
func TestMutualExclusionAcrossClients(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 90*time.Second)
	const clients, workers, rounds = 3, 3, 15
	var inside atomic.Int32
	var counter, lastToken atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*workers)
	for c := range clients {
		cl := newClient(t, s.open(t, fmt.Sprintf("pglock-mx-%d", c)), &lock.Options{TTL: 5 * time.Second})
		for range workers {
			wg.Go(func() {
				for range rounds {
					err := cl.Do(ctx, []string{"sku-1"}, func(ctx context.Context, g *lock.Grant) error {
						if n := inside.Add(1); n != 1 {
							return fmt.Errorf("%d holders at once", n)
						}
						defer inside.Add(-1)
						if tok := g.Token("sku-1"); tok <= lastToken.Load() {
							return fmt.Errorf("token %d not above %d", tok, lastToken.Load())
						} else {
							lastToken.Store(tok)
						}
						v := counter.Load()
						time.Sleep(time.Millisecond) // the work: long enough for a second holder to overlap
						counter.Store(v + 1)
						return nil
					})
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
	if got := counter.Load(); got != clients*workers*rounds {
		t.Fatalf("counter %d, want %d", got, clients*workers*rounds)
	}
}

// Tokens grow across grants, and across a Backend opened again on the same
// table (a restarted service): the rows survive.
func TestTokensSurviveReopen(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 30*time.Second)
	b1 := s.open(t, "pglock-tok-1")
	var last int64
	for i := range 5 {
		tops, err := b1.Obtain(ctx, []string{"r"}, fmt.Sprint("v", i), time.Second, 3)
		if err != nil {
			t.Fatal(err)
		}
		if tops[0]-2 <= last {
			t.Fatalf("block %d..%d not above %d", tops[0]-2, tops[0], last)
		}
		last = tops[0]
		if err := b1.Release(ctx, []string{"r"}, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	b2 := s.open(t, "pglock-tok-2")
	cl := newClient(t, b2, nil)
	if err := cl.Do(ctx, []string{"r"}, func(_ context.Context, g *lock.Grant) error {
		if g.Token("r") <= last {
			return fmt.Errorf("token %d after reopening is not above %d", g.Token("r"), last)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A holder that obtained and never renewed (crashed) blocks the resource for its
// TTL only.
func TestCrashedHolderLeaseEnds(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 30*time.Second)
	b := s.open(t, "pglock-crash")
	const ttl = 700 * time.Millisecond
	start := time.Now()
	if _, err := b.Obtain(ctx, []string{"r"}, "dead", ttl, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, []string{"r"}, "alive", ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("second obtain during the lease: %v, want ErrBusy", err)
	}
	cl := newClient(t, s.open(t, "pglock-crash-2"), &lock.Options{MaxPoll: 50 * time.Millisecond})
	if err := cl.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < ttl-50*time.Millisecond {
		t.Fatalf("granted after %s, before the dead holder's lease of %s ended", waited, ttl)
	}
	if held, err := b.Held(ctx, "r", "dead"); err != nil || held {
		t.Fatalf("dead holder still holds: %v %v", held, err)
	}
	if err := b.Renew(ctx, []string{"r"}, "dead", ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by the dead holder: %v, want ErrNotHeld", err)
	}
}

// A waiter in another process is woken by the release's NOTIFY, not its poll.
func TestWaiterIsWokenByNotify(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 20*time.Second) // far under the poll
	slowMetrics := lockprom.New("b")
	slow := &lock.Options{MinPoll: time.Minute, MaxPoll: time.Minute, Metrics: slowMetrics}
	a := newClient(t, s.open(t, "pglock-wake-a"), nil)
	b := newClient(t, s.open(t, "pglock-wake-b"), slow)
	bGot := make(chan error, 1)
	err := a.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
		go func() {
			bGot <- b.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil })
		}()
		waitFor(ctx, t, "B finds the lock busy", func() bool {
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

// Release, Renew and Advance by a value that does not hold the row change
// nothing.
func TestNonHolderChangesNothing(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 20*time.Second)
	b := s.open(t, "pglock-nonholder")
	tops, err := b.Obtain(ctx, []string{"a", "b"}, "owner", 10*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"a", "b"}, "thief"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if held, err := b.Held(ctx, n, "owner"); err != nil || !held {
			t.Fatalf("%s after a stranger's release: held %v, %v", n, held, err)
		}
	}
	if _, err := b.Obtain(ctx, []string{"b"}, "other", time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain of a held row: %v, want ErrBusy", err)
	}
	if err := b.Renew(ctx, []string{"a"}, "thief", time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew by a stranger: %v, want ErrNotHeld", err)
	}
	if _, err := b.Advance(ctx, "a", "thief", 1000); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("advance by a stranger: %v, want ErrNotHeld", err)
	}
	// The holder's Advance moves the token past what the store has seen.
	tok, err := b.Advance(ctx, "a", "owner", tops[0]+1000)
	if err != nil || tok != tops[0]+1001 {
		t.Fatalf("advance: %d, %v; want %d", tok, err, tops[0]+1001)
	}
	// Renew is all or nothing: one name not held fails and extends neither.
	if err := b.Renew(ctx, []string{"a", "zz"}, "owner", time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renew with a name not held: %v, want ErrNotHeld", err)
	}
	if err := b.Renew(ctx, []string{"a", "b"}, "owner", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, []string{"a", "b"}, "owner"); err != nil {
		t.Fatal(err)
	}
	next, err := b.Obtain(ctx, []string{"a"}, "next", time.Second, 1)
	if err != nil || next[0] <= tok {
		t.Fatalf("obtain after release: %v, %v; want above %d", next, err, tok)
	}
}

// A multi-name obtain that finds one name held takes none of them.
func TestObtainIsAllOrNothing(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 20*time.Second)
	b := s.open(t, "pglock-all")
	if _, err := b.Obtain(ctx, []string{"b"}, "first", 10*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Obtain(ctx, []string{"a", "b", "c"}, "second", 10*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("got %v, want ErrBusy", err)
	}
	for _, n := range []string{"a", "c"} {
		if held, err := b.Held(ctx, n, "second"); err != nil || held {
			t.Fatalf("%s taken by a failed obtain: %v %v", n, held, err)
		}
	}
	if _, err := b.Obtain(ctx, []string{"a", "c"}, "third", 10*time.Second, 1); err != nil {
		t.Fatalf("a and c after the failed obtain: %v", err)
	}
}

// Clients with overlapping multi-resource sets, and Backends given the names
// in opposite orders, never deadlock: all finish in bounded time and
// PostgreSQL reports no deadlock.
func TestOverlappingSetsNeverDeadlock(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 120*time.Second)
	names := []string{"a", "b", "c", "d", "e"}
	var inside [5]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for c := range 4 {
		cl := newClient(t, s.open(t, fmt.Sprintf("pglock-dl-%d", c)), &lock.Options{TTL: 5 * time.Second, MaxPoll: 50 * time.Millisecond})
		for w := range 2 {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(w)))
			wg.Go(func() {
				for range 12 {
					var set []string
					var idx []int
					for i, n := range names {
						if rng.IntN(2) == 0 {
							set, idx = append(set, n), append(idx, i)
						}
					}
					if len(set) == 0 {
						set, idx = []string{"c"}, []int{2}
					}
					err := cl.Do(ctx, set, func(context.Context, *lock.Grant) error {
						for _, i := range idx {
							if n := inside[i].Add(1); n != 1 {
								return fmt.Errorf("%s held %d times at once", names[i], n)
							}
						}
						time.Sleep(time.Millisecond) // the work
						for _, i := range idx {
							inside[i].Add(-1)
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
	}
	// The Backend itself orders the rows: names in opposite orders, many times.
	b1, b2 := s.open(t, "pglock-dl-x"), s.open(t, "pglock-dl-y")
	for i, b := range []*pglock.Backend{b1, b2} {
		order := []string{"x1", "x2", "x3", "x4"}
		if i == 1 {
			order = []string{"x4", "x3", "x2", "x1"}
		}
		wg.Go(func() {
			for j := range 40 {
				v := fmt.Sprint("v", i, j)
				_, err := b.Obtain(ctx, order, v, 5*time.Second, 1)
				if errors.Is(err, lock.ErrBusy) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if err := b.Release(ctx, order, v); err != nil {
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
}

// The holder's sessions are terminated while it holds the lock (its LISTEN
// connection included): the lease is either kept (renewed on a new connection)
// or lost with the work cancelled, never granted to two at once, and the lock
// works afterwards.
func TestSessionsTerminated(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 60*time.Second)
	app := "pglock-term-" + randomID()
	m := lockprom.New("a")
	holder := newClient(t, s.open(t, app), &lock.Options{TTL: 1500 * time.Millisecond, Metrics: m})
	other := newClient(t, s.open(t, "pglock-term-other"), &lock.Options{TTL: 1500 * time.Millisecond, MaxPoll: 20 * time.Millisecond})
	admin := s.pool(t, "pglock-term-admin")

	// Give the holder a LISTEN session too: it waits once behind the other.
	release := make(chan struct{})
	otherHolds := make(chan struct{})
	go func() {
		_ = other.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error {
			close(otherHolds)
			<-release
			return nil
		})
	}()
	<-otherHolds
	var inside atomic.Int32
	work := func(what string) func(context.Context, *lock.Grant) error {
		return func(ctx context.Context, _ *lock.Grant) error {
			if n := inside.Add(1); n != 1 {
				return fmt.Errorf("%s: %d holders at once", what, n)
			}
			defer inside.Add(-1)
			if what != "holder" {
				return nil
			}
			var killed int
			if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed); err != nil {
				return err
			}
			if killed == 0 {
				return errors.New("no session of the holder to terminate")
			}
			// Work through two renewals after the kill, or until the lease is lost.
			before := metricValue(t, m, "a_lock_renewals_total", map[string]string{"result": "ok"})
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for metricValue(t, m, "a_lock_renewals_total", map[string]string{"result": "ok"}) < before+2 {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-tick.C:
				}
			}
			return nil
		}
	}
	holderDone := make(chan error, 1)
	go func() { holderDone <- holder.Do(ctx, []string{"r"}, work("holder")) }()
	waitFor(ctx, t, "the holder waits", func() bool {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'`, app).Scan(&n)
		return n > 0
	})
	close(release)
	// Meanwhile the other client keeps trying; it must never get in while the
	// holder works.
	stopOther := make(chan struct{})
	otherErrs := make(chan error, 1)
	go func() {
		defer close(otherErrs)
		for range 1000 {
			select {
			case <-stopOther:
				return
			default:
			}
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := other.Do(short, []string{"r"}, work("other"))
			cancel()
			if err != nil && !errors.Is(err, lock.ErrNotObtained) {
				otherErrs <- err
				return
			}
		}
	}()
	err := <-holderDone
	close(stopOther)
	if oerr := <-otherErrs; oerr != nil {
		t.Fatal(oerr)
	}
	switch {
	case err == nil:
		t.Log("the lease was kept: renewed on new connections")
	case errors.Is(err, lock.ErrLeaseLost):
		t.Log("the lease was lost and the work cancelled:", err)
	default:
		t.Fatalf("holder: %v", err)
	}
	// The lock works afterwards, for both.
	for _, c := range []*lock.Client{holder, other} {
		if err := c.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
			t.Fatalf("after the terminations: %v", err)
		}
	}
}

// Migrate from several Backends at once, on a table that does not exist yet.
func TestMigrateConcurrently(t *testing.T) {
	s := newSpace(t)
	ctx := ctxFor(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		b, err := pglock.New(s.pool(t, fmt.Sprint("pglock-mig-", i)), &pglock.Options{Table: s.table})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs <- b.Migrate(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestOptionsValidated(t *testing.T) {
	s := newSpace(t)
	p := s.pool(t, "pglock-opt")
	for _, o := range []pglock.Options{
		{Table: `locks"; DROP TABLE x; --`}, {Table: "a.b.c"}, {Table: "1abc"}, {Channel: "with space"},
		{Table: strings.Repeat("a", 64)},
	} {
		if _, err := pglock.New(p, &o); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := pglock.New(p, &pglock.Options{Table: "public." + s.table}); err != nil {
		t.Errorf("schema-qualified: %v", err)
	}
}

// Open fails fast and says why on a URL it cannot use and on a server that does
// not answer; on a good URL it migrates.
func TestOpen(t *testing.T) {
	base := baseURL(t)
	for _, tc := range []struct{ url, want string }{
		{"mysql://root@127.0.0.1:3306/x", "not a postgres"},
		{"postgres://%zz", "cannot parse"},
		{"postgres://postgres@127.0.0.1:1/test?sslmode=disable", "127.0.0.1:1/test is unreachable"},
	} {
		ctx := ctxFor(t, 30*time.Second)
		start := time.Now()
		b, closeFn, err := pglock.Open(ctx, tc.url, nil)
		if err == nil {
			closeFn()
			t.Fatalf("%s: opened %v", tc.url, b)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it to say %q", tc.url, err, tc.want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: failed after %s", tc.url, d)
		}
	}
	s := newSpace(t)
	ctx := ctxFor(t, 30*time.Second)
	b, closeFn, err := pglock.Open(ctx, base, &pglock.Options{Table: s.table})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	if _, err := b.Obtain(ctx, []string{"r"}, "v", time.Second, 1); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	var app string
	if err := conn.QueryRow(ctx, `SELECT application_name FROM pg_stat_activity WHERE application_name = $1 LIMIT 1`, pglock.DefaultApplicationName).Scan(&app); err != nil {
		t.Errorf("no session named %s: %v", pglock.DefaultApplicationName, err)
	}
}

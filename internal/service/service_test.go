package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/skulock"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// counts is an Observer that counts, and tells onLeading and onExpired (when
// set before the service runs) of the sweeper's events.
type counts struct {
	placed, refused, fenceRejected, cacheRepaired atomic.Int64
	holds, confirmed, released, expired           atomic.Int64
	sweepRefused                                  atomic.Int64
	audits, lastOversold, lastOverdue             atomic.Int64
	onLeading                                     func(bool)
	onExpired                                     func(n int)
	reasons                                       sync.Map // reason -> *atomic.Int64
}

// refusedFor is how many refusals were counted under reason.
func (c *counts) refusedFor(reason string) int64 {
	n, ok := c.reasons.Load(reason)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (c *counts) OrderPlaced() { c.placed.Add(1) }
func (c *counts) OrderRefused(reason string) {
	c.refused.Add(1)
	n, _ := c.reasons.LoadOrStore(reason, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}
func (c *counts) FenceRejected(string) { c.fenceRejected.Add(1) }
func (c *counts) CacheRepaired(string) { c.cacheRepaired.Add(1) }
func (c *counts) HoldPlaced()          { c.holds.Add(1) }
func (c *counts) HoldConfirmed()       { c.confirmed.Add(1) }
func (c *counts) HoldReleased()        { c.released.Add(1) }
func (c *counts) SweepRefused()        { c.sweepRefused.Add(1) }
func (c *counts) Audited(oversold, overdue int64) {
	c.lastOversold.Store(oversold)
	c.lastOverdue.Store(overdue)
	c.audits.Add(1)
}
func (c *counts) HoldsExpired(n int) {
	c.expired.Add(int64(n))
	if c.onExpired != nil {
		c.onExpired(n)
	}
}
func (c *counts) SweeperLeading(b bool) {
	if c.onLeading != nil {
		c.onLeading(b)
	}
}

// replica is one process's worth of the service: its own database pool, Redis
// pool and lock client.
type replica struct {
	svc   *service.Service
	deps  service.Deps
	store *gormstore.Store
	cache *rediscache.Cache
	obs   *counts
}

type world struct {
	dbURL string
	redis *testenv.Redis
	// clock, when set, is the replicas' clock and their stores' (expiry included);
	// sweep is their sweep interval.
	clock *testenv.Clock
	sweep time.Duration
}

func newWorld(t *testing.T, kind string) *world {
	t.Helper()
	w := &world{dbURL: testenv.NewDatabase(t, kind), redis: testenv.NewRedis(t)}
	db, err := gormstore.Open(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gormstore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	_ = sqlDB.Close()
	return w
}

// replica returns a replica on the default strategy; locker replaces its lock
// when not nil.
func (w *world) replica(t *testing.T, locker orders.Locker) *replica {
	t.Helper()
	return w.replicaOf(t, orders.DefaultStrategy, locker)
}

func (w *world) replicaOf(t *testing.T, strategy orders.Strategy, locker orders.Locker) *replica {
	t.Helper()
	db, err := gormstore.Open(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	if db.Name() != "sqlite" {
		// Three replicas and another package's tests beside them stay under
		// PostgreSQL's 100 connections.
		sqlDB.SetMaxOpenConns(8)
		sqlDB.SetMaxIdleConns(8)
	}
	rdb := w.redis.Client(t)
	keys := redislease.Keys{Namespace: w.redis.Namespace}
	if locker == nil {
		locker = w.locker(t)
	}
	now := time.Now
	r := &replica{store: gormstore.New(db, now, 10*time.Second), cache: rediscache.NewCache(rdb, keys, time.Hour), obs: &counts{}}
	if w.clock != nil {
		now = w.clock.Now
		r.store = gormstore.New(db, now, 10*time.Second).WithClock(now)
	}
	deps := service.Deps{Store: r.store, Cache: r.cache, Locker: locker, Observer: r.obs}
	switch strategy {
	case orders.StrategyLockPolling:
		deps.Locker = rediscache.NewPollingLocker(rdb, keys, 5*time.Second, 20*time.Second)
	case orders.StrategyRedisAtomic:
		deps.Counters = rediscache.NewCounters(rdb, keys, time.Hour)
	}
	r.deps = deps
	r.svc = service.New(service.Config{Strategy: strategy, SweepInterval: w.sweep}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), now)
	return r
}

// locker returns a pkg/lock locker of its own.
func (w *world) locker(t *testing.T) orders.Locker {
	t.Helper()
	lc, err := redislease.NewClient(w.redis.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: w.redis.Namespace}},
		&lock.Options{TTL: 5 * time.Second, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	return skulock.NewLocker(lc, orders.DependencyRedis)
}

func forEachDatabase(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { fn(t, kind) })
	}
}

// safeStrategies are every strategy but unsafe.
func safeStrategies() []orders.Strategy {
	var out []orders.Strategy
	for _, s := range orders.Strategies {
		if s != orders.StrategyUnsafe {
			out = append(out, s)
		}
	}
	return out
}

// forEachSafeStrategy runs fn for every safe strategy on every database.
func forEachSafeStrategy(t *testing.T, fn func(t *testing.T, kind string, s orders.Strategy)) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		for _, s := range safeStrategies() {
			t.Run(string(s), func(t *testing.T) { fn(t, kind, s) })
		}
	})
}

func TestConcurrentOrdersNeverOversell(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		reps := []*replica{w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stock := map[string]int64{"A": 60, "B": 20, "C": 5}
		for sku, n := range stock {
			if _, _, err := reps[0].svc.Restock(ctx, sku, n); err != nil {
				t.Fatal(err)
			}
		}
		var accepted sync.Map // sku -> *atomic.Int64
		for sku := range stock {
			accepted.Store(sku, new(atomic.Int64))
		}
		var wg sync.WaitGroup
		errs := make(chan error, 60)
		for g := range 60 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 7))
				for range 6 {
					items := []orders.Item{{SKU: "A", Quantity: 1 + rng.IntN(3)}}
					if rng.IntN(3) == 0 {
						items = append(items, orders.Item{SKU: []string{"B", "C"}[rng.IntN(2)], Quantity: 1 + rng.IntN(2)})
					}
					p, err := reps[g%3].svc.Place(ctx, orders.PlaceRequest{Items: items})
					if errors.Is(err, orders.ErrInsufficientStock) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					for _, it := range p.Order.Items {
						n, _ := accepted.Load(it.SKU)
						n.(*atomic.Int64).Add(int64(it.Quantity))
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		audit, err := reps[0].svc.Audit(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if !audit.Consistent || audit.Oversold != 0 {
			t.Fatalf("I1 broken: %+v", audit)
		}
		cached, err := reps[0].cache.Get(ctx, []string{"A", "B", "C"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range audit.SKUs {
			n, _ := accepted.Load(s.SKU)
			if got := n.(*atomic.Int64).Load(); got != s.Sold {
				t.Errorf("%s: clients were told %d units were sold, the database says %d", s.SKU, got, s.Sold)
			}
			if c, ok := cached[s.SKU]; ok && c != s.Available { // I4: equal or absent
				t.Errorf("%s: cache %d, database %d", s.SKU, c, s.Available)
			}
		}
		if sold := audit.SKUs[0].Sold; sold != stock["A"] {
			t.Errorf("A: sold %d of %d; the load should sell out the hot SKU", sold, stock["A"])
		}
	})
}

// lockedStrategies are those whose orders read the stock cache under fenced locks.
var lockedStrategies = []orders.Strategy{orders.StrategyLockBatch, orders.StrategyLock}

func forEachLockedStrategy(t *testing.T, fn func(t *testing.T, kind string, s orders.Strategy)) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		for _, s := range lockedStrategies {
			t.Run(string(s), func(t *testing.T) { fn(t, kind, s) })
		}
	})
}

func TestCacheIsRepairedWhenTheDatabaseDisagrees(t *testing.T) {
	forEachLockedStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		r := w.replicaOf(t, strategy, nil)
		ctx := context.Background()
		if _, _, err := r.svc.Restock(ctx, "A", 1); err != nil {
			t.Fatal(err)
		}
		if err := r.cache.Delete(ctx, []string{"A"}); err != nil {
			t.Fatal(err)
		}
		if err := r.cache.Set(ctx, map[string]int64{"A": 50}, orders.Fences{"A": 1}); err != nil { // a cache gone wrong
			t.Fatal(err)
		}
		_, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}})
		if !errors.Is(err, orders.ErrInsufficientStock) {
			t.Fatalf("got %v, want insufficient stock from the guarded decrement", err)
		}
		got, err := r.cache.Get(ctx, []string{"A"})
		if err != nil || got["A"] != 1 || r.obs.cacheRepaired.Load() != 1 {
			t.Fatalf("cache %v (%v), %d repairs; want 1 and 1 repair", got, err, r.obs.cacheRepaired.Load())
		}
	})
}

func TestIdempotentRetryCreatesOneOrder(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		a, b := w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil)
		ctx := context.Background()
		if _, _, err := a.svc.Restock(ctx, "A", 10); err != nil {
			t.Fatal(err)
		}
		req := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 3}}, IdempotencyKey: "retry-1"}
		first, err := a.svc.Place(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := b.svc.Place(ctx, req) // the retry lands on another replica
		if err != nil || !again.Replayed || again.Order.ID != first.Order.ID {
			t.Fatalf("retry: %+v %v; want a replay of %s", again, err, first.Order.ID)
		}
		other := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 4}}, IdempotencyKey: "retry-1"}
		if _, err := b.svc.Place(ctx, other); !errors.Is(err, orders.ErrIdempotencyMismatch) {
			t.Fatalf("same key, other body: %v", err)
		}
		st, err := a.svc.Stock(ctx, "A")
		if err != nil || st.Sold != 3 || st.Available != 7 {
			t.Fatalf("stock %+v (%v): the retry sold again", st, err)
		}
		// A refusal is replayed as a refusal, even after restocking.
		// The refusal says how many were available then; its replay, how many now.
		big := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 100}}, IdempotencyKey: "retry-2"}
		var short *orders.InsufficientStockError
		if _, err := a.svc.Place(ctx, big); !errors.As(err, &short) || short.Available["A"] != 7 {
			t.Fatalf("%v (available %v); want insufficient stock, 7 available", err, short)
		}
		if _, _, err := a.svc.Restock(ctx, "A", 1000); err != nil {
			t.Fatal(err)
		}
		_, err = b.svc.Place(ctx, big)
		if !errors.As(err, &short) || !errors.Is(err, orders.ErrInsufficientStock) || short.Available["A"] != 1007 {
			t.Fatalf("replayed refusal: %v (available %v); want insufficient stock, 1007 available now", err, short)
		}
	})
}

// staleLocker hands out tokens below what the database has committed, as a holder
// paused past its lease would hold: its lock is gone, so it cannot advance them.
type staleLocker struct{ token int64 }

func (s staleLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	return fn(ctx, newFakeGrant(skus, s.token, false))
}

// fakeGrant is a grant with fixed tokens. One that holds its lock advances a
// token as pkg/lock does, to one above the store's; one that lost it cannot.
type fakeGrant struct {
	fences   orders.Fences
	holds    bool
	advanced *atomic.Int64
}

func newFakeGrant(skus []string, token int64, holds bool) fakeGrant {
	f := orders.Fences{}
	for _, sku := range skus {
		f[sku] = token
	}
	return fakeGrant{fences: f, holds: holds, advanced: new(atomic.Int64)}
}

func (g fakeGrant) Fences() orders.Fences { return g.fences }

func (g fakeGrant) Advance(_ context.Context, sku string, past int64) error {
	if !g.holds {
		return fmt.Errorf("%w: taken over", orders.ErrLeaseLost)
	}
	g.advanced.Add(1)
	g.fences[sku] = past + 1
	return nil
}

// laggingLocker holds the lock but hands out a token the database has already
// committed, as a counter on a promoted replica that lagged would.
type laggingLocker struct {
	token    int64
	advanced *atomic.Int64
}

func (l laggingLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	g := newFakeGrant(skus, l.token, true)
	g.advanced = l.advanced
	return fn(ctx, g)
}

func TestStaleHolderIsRefusedAndCounted(t *testing.T) {
	forEachLockedStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		live := w.replicaOf(t, strategy, nil)
		stale := w.replicaOf(t, strategy, staleLocker{token: 1})
		ctx := context.Background()
		if _, _, err := live.svc.Restock(ctx, "A", 5); err != nil { // commits a real, much larger token
			t.Fatal(err)
		}
		_, err := stale.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}})
		if !errors.Is(err, orders.ErrStaleFence) || stale.obs.fenceRejected.Load() != 1 {
			t.Fatalf("got %v with %d rejections; want ErrStaleFence, counted once", err, stale.obs.fenceRejected.Load())
		}
		st, _ := live.svc.Stock(ctx, "A")
		if st.Sold != 0 || st.Available != 5 {
			t.Fatalf("the stale holder wrote: %+v", st)
		}
	})
}

// A holder whose token repeats one the database committed (Redis lost the
// counter's latest writes) writes after advancing it once, every committed
// token stays unique (I3: strictly increasing per grant), and nothing is
// refused.
func TestRepeatedTokenIsAdvancedPastTheCommittedOne(t *testing.T) {
	forEachLockedStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		ctx := context.Background()
		if _, _, err := w.replicaOf(t, strategy, staleLocker{token: 1000}).svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err) // commits token 1000 (a lock that lost its lock can still write while the store allows it)
		}
		advanced := new(atomic.Int64)
		lagging := w.replicaOf(t, strategy, laggingLocker{token: 1000, advanced: advanced})
		for i := range 2 { // the second grant repeats 1000 too, now below the store's 1001
			if _, err := lagging.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}}); err != nil {
				t.Fatalf("order %d: %v", i, err)
			}
		}
		if _, _, err := lagging.svc.Restock(ctx, "A", 1); err != nil {
			t.Fatal(err)
		}
		if n := advanced.Load(); n != 3 {
			t.Fatalf("%d advances, want one per write", n)
		}
		st, err := lagging.store.Stock(ctx, "A")
		if err != nil || st.Sold != 2 || st.Available != 4 {
			t.Fatalf("stock %+v (%v); want 2 sold and 4 available", st, err)
		}
		fences := ledgerFences(t, w.dbURL, "A")
		for i := 1; i < len(fences); i++ {
			if fences[i] <= fences[i-1] {
				t.Fatalf("ledger fences %v: a token was committed twice or went back", fences)
			}
		}
	})
}

// After a failover the promoted Redis can hold an old cache entry saying 0 under
// a token above ours. An order for a SKU the database has stock of is placed,
// not refused on the cache's word; nothing false is stored under its key; and
// the entry is repaired.
func TestStaleCacheEntryNeverRefusesAnOrder(t *testing.T) {
	forEachLockedStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		r := w.replicaOf(t, strategy, nil)
		ctx := context.Background()
		if _, _, err := r.svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		if err := r.cache.Delete(ctx, []string{"A"}); err != nil {
			t.Fatal(err)
		}
		farAhead := orders.Fences{"A": time.Now().Add(time.Hour).UnixMicro()}
		if err := r.cache.Set(ctx, map[string]int64{"A": 0}, farAhead); err != nil {
			t.Fatal(err)
		}
		req := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}, IdempotencyKey: "after-failover"}
		first, err := r.svc.Place(ctx, req)
		if err != nil {
			t.Fatalf("refused while the database had 5: %v", err)
		}
		again, err := r.svc.Place(ctx, req)
		if err != nil || !again.Replayed || again.Order.ID != first.Order.ID {
			t.Fatalf("retry: %+v %v; want a replay of the order", again, err)
		}
		if got, err := r.cache.Get(ctx, []string{"A"}); err != nil || (got["A"] != 3 && len(got) != 0) {
			t.Fatalf("cache %v (%v) after the repair; want 3 or no entry", got, err)
		}
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 3}}}); err != nil {
			t.Fatalf("the next order after the repair: %v", err)
		}
	})
}

func TestCancelReturnsStockOnce(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		w := newWorld(t, kind)
		r := w.replica(t, nil)
		ctx := context.Background()
		if _, _, err := r.svc.Restock(ctx, "A", 2); err != nil {
			t.Fatal(err)
		}
		p, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.Cancel(ctx, p.Order.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.Cancel(ctx, p.Order.ID); !errors.Is(err, orders.ErrAlreadyCancelled) {
			t.Fatalf("second cancel: %v", err)
		}
		st, _ := r.svc.Stock(ctx, "A")
		cached, _ := r.cache.Get(ctx, []string{"A"})
		if st.Available != 2 || st.Sold != 0 || cached["A"] != 2 {
			t.Fatalf("after cancel: %+v, cache %v", st, cached)
		}
		if _, err := r.svc.Cancel(ctx, "missing"); !errors.Is(err, orders.ErrNotFound) {
			t.Fatalf("unknown order: %v", err)
		}
	})
}

// gateLocker keeps every caller out of the lock until open is closed.
type gateLocker struct {
	open  <-chan struct{}
	inner orders.Locker
}

func (g gateLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.inner.WithLocks(ctx, skus, fn)
}

func TestLockBatchServesAQueueInOneCriticalSection(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		w := newWorld(t, kind)
		ctx := context.Background()
		open := make(chan struct{})
		r := w.replicaOf(t, orders.StrategyLockBatch, gateLocker{open: open, inner: w.locker(t)})
		if _, _, err := w.replicaOf(t, orders.StrategyLock, nil).svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		// Nine orders queue while the lock is held elsewhere: seven with their own
		// keys, one repeating the first key, and one whose client leaves before the
		// lock comes.
		const queued = 9
		allQueued := make(chan struct{})
		service.OnQueued(r.svc, func(n int) {
			if n == queued {
				close(allQueued)
			}
		})
		one := []orders.Item{{SKU: "A", Quantity: 1}}
		type answer struct {
			key    string
			placed orders.Placed
			err    error
		}
		answers := make(chan answer, queued)
		var wg sync.WaitGroup
		for i := range 8 {
			key := fmt.Sprintf("k%d", i%7)
			wg.Go(func() {
				p, err := r.svc.Place(ctx, orders.PlaceRequest{Items: one, IdempotencyKey: key})
				answers <- answer{key, p, err}
			})
		}
		gone, leave := context.WithCancel(ctx)
		leftErr := make(chan error, 1)
		go func() {
			_, err := r.svc.Place(gone, orders.PlaceRequest{Items: one, IdempotencyKey: "left"})
			leftErr <- err
		}()
		<-allQueued
		leave()
		if err := <-leftErr; !errors.Is(err, context.Canceled) {
			t.Errorf("a caller that left: %v", err)
		}
		close(open)
		wg.Wait()
		close(answers)

		byKey := map[string][]answer{}
		placed, refused := 0, 0
		for a := range answers {
			byKey[a.key] = append(byKey[a.key], a)
			switch {
			case a.err == nil && !a.placed.Replayed:
				placed++
			case errors.Is(a.err, orders.ErrInsufficientStock):
				refused++
			case a.err != nil:
				t.Errorf("%s: %v", a.key, a.err)
			}
		}
		k0 := byKey["k0"]
		if len(k0) != 2 || (k0[0].err == nil) != (k0[1].err == nil) || k0[0].placed.Order.ID != k0[1].placed.Order.ID {
			t.Errorf("the repeated key got different answers: %+v", k0)
		}
		// Five units: five orders placed; the other two keys, and the repeat when
		// its first was refused, were refused.
		if placed != 5 || refused+placed != 8-boolInt(k0[0].err == nil) {
			t.Errorf("%d placed, %d refused; want 5 placed of 5 units", placed, refused)
		}

		db := r.store.DB()
		var sales, fences int64
		db.Raw("SELECT COUNT(*) FROM stock_ledger WHERE kind = 'sale'").Scan(&sales)
		db.Raw("SELECT COUNT(DISTINCT fence) FROM stock_ledger WHERE kind = 'sale'").Scan(&fences)
		if sales != 5 || fences != 1 {
			t.Errorf("%d sales under %d fencing tokens; want 5 under one (one critical section)", sales, fences)
		}
		var left, records int64
		db.Raw("SELECT COUNT(*) FROM idempotency_records WHERE idem_key = 'left'").Scan(&left)
		db.Raw("SELECT COUNT(*) FROM idempotency_records").Scan(&records)
		if left != 0 || records != 7 {
			t.Errorf("%d orders of the caller who left, %d idempotency records; want 0 and 7", left, records)
		}
		if kind == testenv.Postgres {
			var txs int64
			db.Raw("SELECT COUNT(DISTINCT x) FROM (SELECT xmin::text AS x FROM orders UNION ALL SELECT xmin::text FROM idempotency_records) t").Scan(&txs)
			if txs != 1 {
				t.Errorf("the batch took %d transactions; want 1", txs)
			}
		}
		audit, err := r.svc.Audit(ctx, true)
		if err != nil || !audit.Consistent || audit.SKUs[0].Sold != 5 {
			t.Errorf("audit %+v %v", audit, err)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// slowCommit holds every Commit until release is closed, and says when one began.
type slowCommit struct {
	*gormstore.Store
	began   chan struct{}
	release chan struct{}
}

func (s slowCommit) Commit(ctx context.Context, b orders.Batch, f orders.Fences) (map[string]int64, error) {
	select {
	case s.began <- struct{}{}:
	default:
	}
	<-s.release
	return s.Store.Commit(ctx, b, f)
}

func TestLockBatchAnswersWhatItCommittedAfterTheCallerGaveUp(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	base := w.replicaOf(t, orders.StrategyLockBatch, nil)
	if _, _, err := base.svc.Restock(ctx, "A", 5); err != nil {
		t.Fatal(err)
	}
	slow := slowCommit{Store: base.store, began: make(chan struct{}, 1), release: make(chan struct{})}
	svc := service.New(service.Config{Strategy: orders.StrategyLockBatch},
		service.Deps{Store: slow, Cache: base.cache, Locker: w.locker(t), Observer: &counts{}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	caller, giveUp := context.WithCancel(ctx)
	type answer struct {
		p   orders.Placed
		err error
	}
	got := make(chan answer, 1)
	go func() {
		p, err := svc.Place(caller, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}})
		got <- answer{p, err}
	}()
	<-slow.began // the order is in a batch being committed
	giveUp()     // the client's deadline passes now
	close(slow.release)
	a := <-got
	if a.err != nil {
		t.Fatalf("the order was committed, but its caller was told %v", a.err)
	}
	if o, err := base.store.Order(ctx, a.p.Order.ID); err != nil || o.ID != a.p.Order.ID {
		t.Fatalf("the answered order is not stored: %v", err)
	}
}

// defaultKind is the database of tests that need one, not each kind: PostgreSQL
// when it is configured or required, else SQLite.
func defaultKind() string {
	if os.Getenv("STOCKGUARD_TEST_DATABASE_URL") != "" || testenv.RequireReal() {
		return testenv.Postgres
	}
	return testenv.SQLite
}

// ledgerFences reads the fencing tokens of sku's ledger entries straight from
// the database, in the order they were written.
func ledgerFences(t *testing.T, dbURL, sku string) []int64 {
	t.Helper()
	db, err := gormstore.Open(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer func() { _ = sqlDB.Close() }()
	var fences []int64
	if err := db.Raw("SELECT fence FROM stock_ledger WHERE sku = ? ORDER BY id", sku).Scan(&fences).Error; err != nil {
		t.Fatal(err)
	}
	if len(fences) == 0 {
		t.Fatalf("no ledger entries for %s", sku)
	}
	return fences
}

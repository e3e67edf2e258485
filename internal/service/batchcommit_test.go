package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

// writeCalls counts the store's writes of a batch: Commit (placements),
// End (endings), CommitChanges (both).
type writeCalls struct {
	*gormstore.Store
	commits, ends, changes atomic.Int64
}

func (c *writeCalls) Commit(ctx context.Context, b orders.Batch, f orders.Fences) (map[string]int64, error) {
	c.commits.Add(1)
	return c.Store.Commit(ctx, b, f)
}

func (c *writeCalls) End(ctx context.Context, es []orders.Ending, f orders.Fences) ([]orders.Ended, map[string]int64, error) {
	c.ends.Add(1)
	return c.Store.End(ctx, es, f)
}

func (c *writeCalls) CommitChanges(ctx context.Context, ch orders.Changes, f orders.Fences) ([]orders.Ended, map[string]int64, error) {
	c.changes.Add(1)
	return c.Store.CommitChanges(ctx, ch, f)
}

// A lock-batch batch's orders, holds, confirms, releases and a sweeper's
// slice of expiries commit in one transaction (Store.CommitChanges, once),
// each decided on its own: a confirm of a hold that does not exist and a
// release of a hold confirmed earlier in the batch are refused, a short order
// is refused under its key, and the rest commit; each SKU's events are
// numbered with no gap, and the cache is the database's. On every database.
func TestLockBatchCommitsOrdersAndEndingsAsOne(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testLockBatchCommitsAsOne(t, kind) })
	}
}

func testLockBatchCommitsAsOne(t *testing.T, kind string) {
	w := newClockWorld(t, kind)
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	for _, sku := range []string{"A", "B", "Z"} {
		if _, _, err := admin.svc.Restock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(ttl time.Duration, its ...orders.Item) string {
		h, err := admin.svc.Hold(ctx, orders.HoldRequest{Items: its, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return h.Reservation.ID
	}
	h1, h2, hx := hold(time.Hour, items("A", 2)...), hold(time.Hour, items("A", 1, "B", 1)...), hold(time.Second, items("B", 1)...)
	w.clock.Add(2 * time.Second) // hx expires

	base := w.replicaOf(t, orders.StrategyLockBatch, nil)
	counted := &writeCalls{Store: base.store}
	open := make(chan struct{})
	wanted := make(chan []string, 4)
	deps := base.deps
	deps.Store = counted
	deps.Locker = tellingGate{open: open, wanted: wanted, inner: w.locker(t)}
	svc := service.New(service.Config{Strategy: orders.StrategyLockBatch}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), w.clock.Now)
	queued := make(chan int, 16)
	service.OnQueued(svc, func(n int) { queued <- n })
	blocked := placeInOrder(t, svc, queued, []orders.PlaceRequest{{Items: items("Z", 1)}})
	<-wanted

	var placed, short orders.Placed
	var confirmed orders.Placed
	var released, held orders.Held
	var swept int
	chs := inOrder(t, queued, 1, []func() error{
		func() (err error) {
			placed, err = svc.Place(ctx, orders.PlaceRequest{Items: items("A", 1), IdempotencyKey: "k1"})
			return err
		},
		func() (err error) {
			confirmed, err = svc.Confirm(ctx, orders.ConfirmRequest{ID: h1, IdempotencyKey: "c1"})
			return err
		},
		func() (err error) { released, err = svc.Release(ctx, orders.HoldAction{ID: h2}); return err },
		func() (err error) { swept, err = svc.Sweep(ctx, leader); return err },
		func() error { _, err := svc.Confirm(ctx, orders.ConfirmRequest{ID: "h-none"}); return err },
		func() error { _, err := svc.Release(ctx, orders.HoldAction{ID: h1}); return err },
		func() (err error) {
			held, err = svc.Hold(ctx, orders.HoldRequest{Items: items("B", 2), TTL: time.Hour, IdempotencyKey: "k-hold"})
			return err
		},
		func() (err error) {
			short, err = svc.Place(ctx, orders.PlaceRequest{Items: items("B", 100), IdempotencyKey: "k-short"})
			return err
		},
	})
	close(open)
	if got := <-wanted; !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("the second batch locked %v; want [A B]", got)
	}
	if a := <-blocked[0]; a.err != nil {
		t.Fatal(a.err)
	}
	errs := make([]error, len(chs))
	for i, ch := range chs {
		errs[i] = <-ch
	}
	for i, want := range []error{nil, nil, nil, nil, orders.ErrNotFound, orders.ErrHoldConfirmed, nil, orders.ErrInsufficientStock} {
		if (want == nil && errs[i] != nil) || (want != nil && !errors.Is(errs[i], want)) {
			t.Errorf("change %d: %v; want %v", i, errs[i], want)
		}
	}
	if placed.Order.ID == "" || confirmed.Order.ReservationID != h1 || released.Reservation.Status != orders.HoldReleased ||
		held.Reservation.Status != orders.HoldHeld || swept != 1 || short.Order.ID != "" {
		t.Errorf("answers: placed %+v, confirmed %+v, released %+v, held %+v, swept %d", placed, confirmed, released, held, swept)
	}
	// One write for the second batch: the first batch's Commit, then one
	// CommitChanges.
	if c, e, ch := counted.commits.Load(), counted.ends.Load(), counted.changes.Load(); c != 1 || e != 0 || ch != 1 {
		t.Errorf("the store's writes: %d Commit, %d End, %d CommitChanges; want 1 (the first batch), 0, 1", c, e, ch)
	}
	// A: 10; h1 confirmed (2 sold), h2's 1 back, an order of 1.
	// B: 10; h2's and hx's 1 back, a hold of 2.
	for sku, want := range map[string]orders.Stock{"A": {Available: 7, Sold: 3}, "B": {Available: 8, Held: 2}} {
		st, err := svc.Stock(ctx, sku)
		if err != nil || st.Available != want.Available || st.Sold != want.Sold || st.Held != want.Held {
			t.Errorf("%s: %+v %v; want %+v", sku, st, err, want)
		}
	}
	db := base.store.DB()
	for _, sku := range []string{"A", "B"} {
		var seqs []int64
		db.Raw("SELECT seq FROM stock_events WHERE sku = ? ORDER BY seq", sku).Scan(&seqs)
		for i, s := range seqs {
			if s != int64(i+1) {
				t.Errorf("%s's events numbered %v; want 1, 2, ... with no gap", sku, seqs)
				break
			}
		}
	}
	if db.Name() == "postgres" {
		var txs int64
		db.Raw(`SELECT COUNT(DISTINCT x) FROM (
  SELECT xmin::text AS x FROM orders WHERE id IN ?
  UNION ALL SELECT xmin::text FROM reservations WHERE id IN ?
  UNION ALL SELECT xmin::text FROM idempotency_records WHERE idem_key LIKE '%k-short' OR idem_key LIKE '%k1' OR idem_key LIKE '%c1') t`,
			[]string{placed.Order.ID, confirmed.Order.ID}, []string{h1, h2, hx, held.Reservation.ID}).Scan(&txs)
		if txs != 1 {
			t.Errorf("the batch took %d transactions; want 1", txs)
		}
	}
	cached, err := base.cache.Get(ctx, []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	for sku, n := range map[string]int64{"A": 7, "B": 8} {
		if c, ok := cached[sku]; ok && c != n {
			t.Errorf("I4: the cache says %d of %s; the database %d", c, sku, n)
		}
	}
	audit, err := svc.Audit(ctx, true)
	if err != nil || !audit.Consistent {
		t.Errorf("audit %+v %v", audit, err)
	}
}

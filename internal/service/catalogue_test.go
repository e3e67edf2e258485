package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

// refusingLocker fails the test when a lock is asked for: what it guards must
// be decided without one.
type refusingLocker struct{ t *testing.T }

func (l refusingLocker) WithLocks(context.Context, []string, func(context.Context, orders.Grant) error) error {
	l.t.Error("a lock was taken")
	return orders.ErrBusy
}

// An order or a hold naming a SKU never stocked is refused as unknown, every
// unknown SKU named, without a lock; a known SKU of the same order is not named.
func TestUnknownSKUDecidedWithoutLock(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		w := newWorld(t, kind)
		if _, _, err := w.replica(t, nil).svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		r := w.replica(t, refusingLocker{t})
		_, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}, {SKU: "NOPE-9", Quantity: 1}, {SKU: "NOPE-1", Quantity: 2}}})
		var unknown *orders.UnknownSKUError
		if !errors.As(err, &unknown) || !errors.Is(err, orders.ErrUnknownSKU) || !slices.Equal(unknown.SKUs, []string{"NOPE-1", "NOPE-9"}) {
			t.Fatalf("order naming NOPE-1 and NOPE-9: %v, want unknown sku NOPE-1, NOPE-9", err)
		}
		_, err = r.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "NOPE-9", Quantity: 1}}})
		if !errors.As(err, &unknown) || !slices.Equal(unknown.SKUs, []string{"NOPE-9"}) {
			t.Fatalf("hold of NOPE-9: %v, want unknown sku NOPE-9", err)
		}
		if st, err := r.store.Stock(ctx, "A"); err != nil || st.Available != 5 {
			t.Fatalf("A after the refusals: %+v %v, want 5 available", st, err)
		}
	})
}

// PUT's use case: a new SKU is created (true), an existing one set to an
// absolute value, up or down, and the ledger records each difference, so the
// deep audit (counters against the history) stays consistent.
func TestSetStock(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		w := newWorld(t, kind)
		r := w.replica(t, nil)
		st, created, err := r.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 10})
		if err != nil || !created || st.Available != 10 || st.Stocked != 10 {
			t.Fatalf("first set: %+v created=%v %v, want 10 available, created", st, created, err)
		}
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "S-1", Quantity: 3}}}); err != nil {
			t.Fatal(err)
		}
		for _, want := range []int64{2, 40, 40, 0} {
			st, created, err = r.svc.SetStock(ctx, "S-1", orders.StockSet{Available: want})
			if err != nil || created || st.Available != want || st.Sold != 3 || st.Stocked != want+3 {
				t.Fatalf("set to %d: %+v created=%v %v, want available %d, sold 3, stocked %d", want, st, created, err, want, want+3)
			}
		}
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: "S-1", Quantity: 1}}}); !errors.Is(err, orders.ErrInsufficientStock) {
			t.Fatalf("order after the stock was set to 0: %v, want insufficient stock", err)
		}
		a, err := r.svc.Audit(ctx, true)
		if err != nil || !a.Consistent || a.Oversold != 0 {
			t.Fatalf("deep audit: %+v %v", a, err)
		}
		for _, bad := range []int64{-1, orders.MaxRestock + 1} {
			if _, _, err := r.svc.SetStock(ctx, "S-1", orders.StockSet{Available: bad}); !errors.Is(err, orders.ErrInvalid) {
				t.Errorf("set to %d: %v, want invalid", bad, err)
			}
		}
		if _, created, err := r.svc.Restock(ctx, "R-1", 1); err != nil || !created {
			t.Errorf("restock of a new SKU: created=%v %v, want created", created, err)
		}
		if _, created, err := r.svc.Restock(ctx, "R-1", 1); err != nil || created {
			t.Errorf("restock of an existing SKU: created=%v %v, want not created", created, err)
		}
	})
}

// A compare-and-set through the SKU's lock: two replicas' stock-takers who
// read the same stock, one after the other, cannot both set it; the second is
// refused with the stock as it is, and nothing of its set is made. Values
// out of range are refused by name.
func TestSetStockCompareAndSet(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		w := newWorld(t, kind)
		a, b := w.replica(t, nil), w.replica(t, nil)
		zero, ten, two := int64(0), int64(10), int64(2)
		if _, created, err := a.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 10, ExpectedAvailable: &zero}); err != nil || !created {
			t.Fatalf("a new SKU expecting 0: created=%v %v", created, err)
		}
		st, _, err := a.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 8, ExpectedAvailable: &ten, LowStockThreshold: &two})
		if err != nil || st.Available != 8 || st.LowStockThreshold == nil || *st.LowStockThreshold != 2 {
			t.Fatalf("a's set: %+v %v", st, err)
		}
		_, _, err = b.svc.SetStock(ctx, "S-1", orders.StockSet{Available: 9, ExpectedAvailable: &ten, LowStockThreshold: &zero})
		var stale *orders.StaleQuantityError
		if !errors.As(err, &stale) || stale.Stock.Available != 8 {
			t.Fatalf("b's set from the same count: %v, want stale-quantity with 8", err)
		}
		if st, err := b.svc.Stock(ctx, "S-1"); err != nil || st.Available != 8 || st.LowStockThreshold == nil {
			t.Fatalf("after b's refused set: %+v %v", st, err)
		}
		minus := int64(-1)
		for _, set := range []orders.StockSet{{Available: 1, ExpectedAvailable: &minus}, {Available: 1, LowStockThreshold: &minus}} {
			if _, _, err := a.svc.SetStock(ctx, "S-1", set); !errors.Is(err, orders.ErrInvalid) {
				t.Errorf("set %+v: %v, want invalid", set, err)
			}
		}
	})
}

// The listings walk every item once, in their order, page by page.
func TestListings(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		ctx := context.Background()
		w := newWorld(t, kind)
		// Order ids sort by their millisecond: the clock moves between orders so
		// that newest first is one order.
		w.clock = testenv.NewClock(time.Now())
		r := w.replica(t, nil)
		var skus []string
		for i := range 7 {
			sku := fmt.Sprintf("L-%d", i)
			skus = append(skus, sku)
			if _, _, err := r.svc.SetStock(ctx, sku, orders.StockSet{Available: 100}); err != nil {
				t.Fatal(err)
			}
		}
		var placed []string
		for i := range 5 {
			p, err := r.svc.Place(ctx, orders.PlaceRequest{Items: []orders.Item{{SKU: skus[i], Quantity: 1}, {SKU: skus[i+1], Quantity: 2}}})
			if err != nil {
				t.Fatal(err)
			}
			placed = append(placed, p.Order.ID)
			w.clock.Add(time.Millisecond)
		}

		var got []string
		after := ""
		for range 10 { // at most: 7 SKUs in pages of 3
			page, more, err := r.svc.SKUs(ctx, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range page {
				got = append(got, st.SKU)
			}
			if !more {
				break
			}
			after = page[len(page)-1].SKU
		}
		if !slices.Equal(got, skus) {
			t.Errorf("SKUs page by page: %v, want %v", got, skus)
		}

		got, after = nil, ""
		for range 10 {
			page, more, err := r.svc.Orders(ctx, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page {
				if len(o.Items) != 2 || o.Items[1].Quantity != 2 {
					t.Errorf("order %s listed with items %+v", o.ID, o.Items)
				}
				got = append(got, o.ID)
			}
			if !more {
				break
			}
			after = page[len(page)-1].ID
		}
		slices.Reverse(placed) // newest first
		if !slices.Equal(got, placed) {
			t.Errorf("orders page by page: %v, want %v", got, placed)
		}

		for _, c := range []struct {
			after string
			limit int
		}{{"", 0}, {"", 101}, {"not an id", 10}} {
			if _, _, err := r.svc.Orders(ctx, c.after, c.limit); !errors.Is(err, orders.ErrInvalid) {
				t.Errorf("orders after %q, limit %d: %v, want invalid", c.after, c.limit, err)
			}
		}
		if _, _, err := r.svc.SKUs(ctx, "bad sku!", 10); !errors.Is(err, orders.ErrInvalid) {
			t.Errorf("SKUs after a bad SKU: %v, want invalid", err)
		}
	})
}

// The sweeper's leader audits every AuditInterval and tells the observer what
// the shallow audit says, an oversell included (made here behind the
// service's back, as a bug or a hand edit would).
func TestSweeperLeaderAudits(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, testenv.DatabaseKinds()[0])
	w.sweep = 20 * time.Millisecond
	r := w.replica(t, nil)
	r.deps.Leader = w.locker(t)
	r.svc = service.New(service.Config{SweepInterval: w.sweep, AuditInterval: 20 * time.Millisecond}, r.deps,
		slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	if _, _, err := r.svc.SetStock(ctx, "AU-1", orders.StockSet{Available: 5}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.svc.RunSweeper(sctx) }()
	defer func() { stop(); <-done }()

	waitAudit := func(wantOversold int64) {
		t.Helper()
		after := r.obs.audits.Load()
		for deadline := time.Now().Add(15 * time.Second); ; {
			if n := r.obs.audits.Load(); n > after && r.obs.lastOversold.Load() == wantOversold {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no audit with %d units oversold in 15s: %d audits, last %d oversold", wantOversold, r.obs.audits.Load(), r.obs.lastOversold.Load())
			}
			time.Sleep(10 * time.Millisecond) // polling the observer, with a deadline
		}
	}
	waitAudit(0)
	db, err := gormstore.Open(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	defer func() { _ = sqlDB.Close() }()
	if err := db.Exec("UPDATE skus SET sold = stocked + 3, available = 0 WHERE sku = ?", "AU-1").Error; err != nil {
		t.Fatal(err)
	}
	waitAudit(3)
}

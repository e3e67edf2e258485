package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// openDB opens a new database of kind, not migrated, closed when the test ends.
func openDB(t *testing.T, kind string) *gorm.DB {
	t.Helper()
	db, err := gormstore.Open(testenv.NewDatabase(t, kind))
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

func newStore(t *testing.T, kind string) (*gormstore.Store, *testenv.Clock) {
	t.Helper()
	db := openDB(t, kind)
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 { // replicas starting at once
		wg.Go(func() {
			_, err := gormstore.Migrate(context.Background(), db)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, err := gormstore.Migrate(context.Background(), db); err != nil || n != 0 {
		t.Fatalf("migrating again applied %d (%v), want 0", n, err)
	}
	c := testenv.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	return gormstore.New(db, c.Now, 10*time.Second), c
}

func order(id string, items ...orders.Item) orders.Order {
	return orders.Order{ID: id, Status: orders.StatusPlaced, Items: items, CreatedAt: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
}

func TestStore(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("place, refuse, cancel", func(t *testing.T) { testPlace(t, kind) })
			t.Run("fencing", func(t *testing.T) { testFencing(t, kind) })
			t.Run("idempotency", func(t *testing.T) { testIdempotency(t, kind) })
			t.Run("commit a batch", func(t *testing.T) { testCommit(t, kind) })
			t.Run("unguarded", func(t *testing.T) { testUnguarded(t, kind) })
		})
	}
}

// place commits one order, as the locked strategies do.
func place(s *gormstore.Store, o orders.Order, fences orders.Fences, key string) (map[string]int64, error) {
	return s.Commit(context.Background(), orders.Batch{Placed: []orders.Placement{{Order: o, Key: key, Hash: "h-" + key}}}, fences)
}

func testPlace(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 5, 1)
	mustRestock(t, s, "B-2", 1, 1)

	after, err := place(s, order("o1", orders.Item{SKU: "A-1", Quantity: 2}, orders.Item{SKU: "B-2", Quantity: 1}), orders.Fences{"A-1": 2, "B-2": 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	if after["A-1"] != 3 || after["B-2"] != 0 {
		t.Fatalf("after %v, want A-1 3, B-2 0", after)
	}

	// Short on B-2 and on an unknown SKU: refused whole, naming both, nothing written.
	_, err = place(s, order("o2", orders.Item{SKU: "A-1", Quantity: 1}, orders.Item{SKU: "B-2", Quantity: 1}, orders.Item{SKU: "C-3", Quantity: 1}),
		orders.Fences{"A-1": 3, "B-2": 3, "C-3": 3}, "")
	var short *orders.InsufficientStockError
	if !errors.As(err, &short) || len(short.SKUs) != 2 || short.SKUs[0] != "B-2" || short.SKUs[1] != "C-3" {
		t.Fatalf("got %v, want insufficient stock for B-2 and C-3", err)
	}
	if a, ok := short.Available["B-2"]; !ok || a != 0 || len(short.Available) != 2 {
		t.Fatalf("available %v; want B-2: 0 and C-3: 0", short.Available)
	}
	if _, err := s.Order(ctx, "o2"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("refused order stored: %v", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5})

	o, after, err := s.Cancel(ctx, "o1", orders.Fences{"A-1": 4, "B-2": 4}, time.Now())
	if err != nil || o.Status != orders.StatusCancelled || o.CancelledAt == nil || after["B-2"] != 1 {
		t.Fatalf("cancel: %+v %v %v", o, after, err)
	}
	if _, _, err := s.Cancel(ctx, "o1", orders.Fences{"A-1": 5, "B-2": 5}, time.Now()); !errors.Is(err, orders.ErrAlreadyCancelled) {
		t.Fatalf("second cancel: %v, want ErrAlreadyCancelled", err)
	}
	if _, _, err := s.Cancel(ctx, "nope", nil, time.Now()); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("unknown cancel: %v, want ErrNotFound", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 5, Sold: 0, Stocked: 5})

	// The database's own guard: available never goes below zero, lock or not.
	if err := s.DB().Exec("UPDATE skus SET available = -1 WHERE sku = 'A-1'").Error; err == nil {
		t.Fatal("the CHECK constraint let available go negative")
	}
	// SKUs are case-sensitive on every database (MySQL's default collation is not).
	mustRestock(t, s, "a-1", 7, 1)
	wantStock(t, s, orders.Stock{SKU: "a-1", Available: 7, Sold: 0, Stocked: 7})
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 5, Sold: 0, Stocked: 5})
	audit := mustAudit(t, s)
	if !audit.Consistent || audit.Oversold != 0 || len(audit.SKUs) != 3 {
		t.Fatalf("audit %+v", audit)
	}
}

func testFencing(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 10, 100)
	_, err := place(s, order("o1", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 99}, "")
	var stale *orders.StaleFenceError
	if !errors.As(err, &stale) || stale.Token != 99 || stale.Last != 100 {
		t.Fatalf("got %v, want a stale fence (99 after 100)", err)
	}
	// Two grants never commit under one token: the same token again is refused.
	if _, err := place(s, order("o2", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 100}, ""); !errors.As(err, &stale) || stale.Token != 100 || stale.Last != 100 {
		t.Fatalf("the same token again: %v, want a stale fence (100 after 100)", err)
	}
	if _, err := s.Restock(ctx, "A-1", 1, 100); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("restock under the committed token: %v, want ErrStaleFence", err)
	}
	if _, err := place(s, order("o2", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 101}, ""); err != nil {
		t.Fatalf("the next token: %v", err)
	}
	if _, err := place(s, order("o3", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 150}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restock(ctx, "A-1", 1, 120); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("restock under an old token: %v, want ErrStaleFence", err)
	}
	if _, _, err := s.Cancel(ctx, "o3", orders.Fences{"A-1": 149}, time.Now()); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("cancel under an old token: %v, want ErrStaleFence", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 8, Sold: 2, Stocked: 10})
}

func testIdempotency(t *testing.T, kind string) {
	s, clk := newStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 5, 1)
	start := clk.Now()

	if _, err := place(s, order("o1", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 2}, "k1"); err != nil {
		t.Fatal(err)
	}
	// Keys are case-sensitive on every database.
	if _, err := place(s, order("o2", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 3}, "K1"); err != nil {
		t.Fatalf("a key differing in case is another key: %v", err)
	}
	// The same key again is refused whole: no order, no stock taken.
	_, err := place(s, order("o3", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 4}, "k1")
	if !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a recorded key: %v, want ErrIdempotencyConflict", err)
	}
	if _, err := s.Order(ctx, "o3"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("the conflicting order was stored: %v", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5})
	// A restock records its key in its transaction: a recorded key refuses it
	// whole, adding nothing.
	if _, err := s.RestockOnce(ctx, "R-1", 4, 1, orders.Keyed{Key: "kr", Hash: "hr"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RestockOnce(ctx, "R-1", 4, 2, orders.Keyed{Key: "kr", Hash: "hr"}); !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a restock of a recorded key: %v, want ErrIdempotencyConflict", err)
	}
	if _, err := s.RestockOnce(ctx, "R-1", 1, 3, orders.Keyed{Key: "k1", Hash: "hr"}); !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a restock of an order's key: %v, want ErrIdempotencyConflict", err)
	}
	wantStock(t, s, orders.Stock{SKU: "R-1", Available: 4, Stocked: 4})
	recs, err := s.Outcomes(ctx, []string{"k1", "K1", "nope"})
	if err != nil || len(recs) != 2 || recs["k1"].Outcome.OrderID != "o1" || recs["K1"].Outcome.OrderID != "o2" ||
		recs["k1"].Hash != "h-k1" || !recs["k1"].CreatedAt.Equal(start) {
		t.Fatalf("records %+v %v", recs, err)
	}

	// Forget deletes only records older than the cutoff; then the key is new.
	if err := s.Forget(ctx, []string{"k1"}, start); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.Outcomes(ctx, []string{"k1"}); len(recs) != 1 {
		t.Fatal("a record as old as the cutoff was forgotten")
	}
	clk.Add(time.Hour)
	if err := s.Forget(ctx, []string{"k1"}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.Outcomes(ctx, []string{"k1", "K1"}); len(recs) != 1 {
		t.Fatalf("after forgetting k1: %+v", recs)
	}
	if _, err := place(s, order("o4", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 5}, "k1"); err != nil {
		t.Fatalf("a forgotten key is new again: %v", err)
	}

	// The purge deletes old records in bounded rounds, oldest first, and no newer one.
	mustRestock(t, s, "A-1", 10, 6)
	for i := range 5 {
		if _, err := place(s, order(fmt.Sprintf("p%d", i), orders.Item{SKU: "A-1", Quantity: 1}), nil, fmt.Sprintf("p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(time.Hour)
	cutoff := clk.Now()
	if _, err := place(s, order("young", orders.Item{SKU: "A-1", Quantity: 1}), nil, "young"); err != nil {
		t.Fatal(err)
	}
	var purged []int
	for range 4 {
		n, err := s.PurgeRecords(ctx, cutoff, 3, orders.Leader{})
		if err != nil {
			t.Fatal(err)
		}
		purged = append(purged, n)
	}
	// K1, o4's k1, the restock's kr and p0-p4 are older than the cutoff: 8 records.
	if fmt.Sprint(purged) != "[3 3 2 0]" {
		t.Fatalf("purged %v per round, want [3 3 2 0]", purged)
	}
	if recs, _ := s.Outcomes(ctx, []string{"young", "p4"}); len(recs) != 1 || recs["young"].Outcome.OrderID != "young" {
		t.Fatalf("after the purge: %+v", recs)
	}
}

// The unsafe strategy's write sets what it read minus the order, whatever is
// there now: two writers who read the same stock both succeed, and the counters
// show the oversell.
func testUnguarded(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 1, 1)
	have := map[string]int64{"A-1": 1}
	for i, key := range []string{"u1", "u2"} {
		p := orders.Placement{Order: order(key, orders.Item{SKU: "A-1", Quantity: 1}), Key: key, Hash: "h"}
		if err := s.CommitUnguarded(ctx, p, have); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 0, Sold: 2, Stocked: 1})
	if a := mustAudit(t, s); a.Consistent || a.Oversold != 1 {
		t.Fatalf("audit %+v, want 1 oversold", a)
	}
	p := orders.Placement{Order: order("u3", orders.Item{SKU: "A-1", Quantity: 1}), Key: "u1", Hash: "h"}
	if err := s.CommitUnguarded(ctx, p, have); !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a recorded key: %v", err)
	}
}

func mustRestock(t *testing.T, s *gormstore.Store, sku string, n, fence int64) {
	t.Helper()
	if _, err := s.Restock(context.Background(), sku, n, fence); err != nil {
		t.Fatal(err)
	}
}

func wantStock(t *testing.T, s *gormstore.Store, want orders.Stock) {
	t.Helper()
	got, err := s.Stock(context.Background(), want.SKU)
	limit := func(st orders.Stock) int64 { // by value: -1 for none
		if st.MaxPerCustomer == nil {
			return -1
		}
		return *st.MaxPerCustomer
	}
	if err == nil && limit(got) == limit(want) {
		got.MaxPerCustomer = want.MaxPerCustomer
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("stock %+v (%v), want %+v", got, err, want)
	}
}

func mustAudit(t *testing.T, s *gormstore.Store) orders.Audit {
	t.Helper()
	stocks, err := s.Stocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recounts, err := s.Recount(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := orders.NewAudit(stocks, recounts)
	if !a.Deep {
		t.Fatal("a deep audit that is not")
	}
	return a
}

func testCommit(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 5, 1)
	one := orders.Item{SKU: "A-1", Quantity: 2}
	placed := []orders.Placement{
		{Order: order("b1", one), Key: "k1", Hash: "h1"},
		{Order: order("b2", one)}, // no key: no record
	}
	refused := []orders.Placement{{Order: order("b3", orders.Item{SKU: "A-1", Quantity: 3}), Key: "k3", Hash: "h3", Short: []string{"A-1"}}}
	after, err := s.Commit(ctx, orders.Batch{Placed: placed, Refused: refused}, orders.Fences{"A-1": 2})
	if err != nil || after["A-1"] != 1 {
		t.Fatalf("commit: %v %v; want 1 left", after, err)
	}
	recs, err := s.Outcomes(ctx, []string{"k1", "k3", "k9"})
	if err != nil || len(recs) != 2 || recs["k1"].Outcome.OrderID != "b1" ||
		recs["k3"].Outcome.OrderID != "" || len(recs["k3"].Outcome.ShortSKUs) != 1 || recs["k3"].Hash != "h3" {
		t.Fatalf("records %+v %v", recs, err)
	}
	// Every order has its own line and ledger entry, under the batch's token.
	var entries, fenced int64
	s.DB().Raw("SELECT COUNT(*) FROM stock_ledger WHERE kind = 'sale'").Scan(&entries)
	s.DB().Raw("SELECT COUNT(*) FROM stock_ledger WHERE kind = 'sale' AND fence = 2").Scan(&fenced)
	if entries != 2 || fenced != 2 {
		t.Fatalf("%d sale entries, %d under the batch's token; want 2 and 2", entries, fenced)
	}

	// A batch whose total is short is refused whole.
	_, err = s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: order("b4", orders.Item{SKU: "A-1", Quantity: 1})},
		{Order: order("b5", orders.Item{SKU: "A-1", Quantity: 1})}}}, orders.Fences{"A-1": 3})
	if !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("short batch: %v", err)
	}
	// A key recorded meanwhile refuses the batch whole, as ErrIdempotencyConflict.
	_, err = s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: order("b6", orders.Item{SKU: "A-1", Quantity: 1}), Key: "k1", Hash: "h1"}}},
		orders.Fences{"A-1": 4})
	if !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a recorded key: %v", err)
	}
	// A stale token is refused; without fences (db-atomic) the guard alone decides.
	_, err = s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: order("b7", orders.Item{SKU: "A-1", Quantity: 1})}}}, orders.Fences{"A-1": 1})
	if !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("stale token: %v", err)
	}
	if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: order("b8", orders.Item{SKU: "A-1", Quantity: 1})}}}, nil); err != nil {
		t.Fatalf("without fences: %v", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 0, Sold: 5, Stocked: 5})
	if a := mustAudit(t, s); !a.Consistent {
		t.Fatalf("audit %+v", a)
	}
}

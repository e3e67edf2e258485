package gormstore_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestCompareAndSet: PUT /v1/skus/{sku} with expected_available, in the
// store. A stale expectation changes nothing (not the stock, not the
// threshold, no event) and answers the stock as it is; the right one is
// applied; of two stock-takers who read the same stock, exactly one wins.
func TestCompareAndSet(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testCompareAndSet(t, kind) })
	}
}

func testCompareAndSet(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	s = s.WithSettleAfter(time.Millisecond)
	ctx := context.Background()
	five, three := int64(5), int64(3)

	// A SKU that does not exist has 0 available: expecting more is stale.
	_, _, err := s.SetStock(ctx, "C-1", orders.StockSet{Available: 10, ExpectedAvailable: &five}, 1)
	var stale *orders.StaleQuantityError
	if !errors.As(err, &stale) || stale.Expected != 5 || !reflect.DeepEqual(stale.Stock, orders.Stock{SKU: "C-1"}) {
		t.Fatalf("a set of a new SKU expecting 5: %v (%+v)", err, stale)
	}
	if _, err := s.Stock(ctx, "C-1"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("the SKU after a stale set: %v, want not found", err)
	}
	zero := int64(0)
	st, created, err := s.SetStock(ctx, "C-1", orders.StockSet{Available: 10, ExpectedAvailable: &zero}, 1)
	if err != nil || !created || st.Available != 10 {
		t.Fatalf("a new SKU expecting 0: %+v created %v, %v", st, created, err)
	}

	// Stale: nothing changes, and the answer has the stock as it is.
	seq := skuSeq(t, s, "C-1")
	_, _, err = s.SetStock(ctx, "C-1", orders.StockSet{Available: 4, LowStockThreshold: &five, MaxPerCustomer: &three,
		ExpectedAvailable: &five}, 2)
	if !errors.Is(err, orders.ErrStaleQuantity) || !errors.As(err, &stale) || stale.Stock.Available != 10 || stale.Stock.Stocked != 10 {
		t.Fatalf("a stale set: %v (%+v)", err, stale)
	}
	if st, err := s.Stock(ctx, "C-1"); err != nil || st.Available != 10 || st.LowStockThreshold != nil || st.MaxPerCustomer != nil {
		t.Fatalf("after a stale set: %+v %v", st, err)
	}
	if n := skuSeq(t, s, "C-1"); n != seq {
		t.Fatalf("a stale set numbered events: event_seq %d, was %d", n, seq)
	}

	// Right: applied, with the threshold (kept when left out, 0 removes it).
	ten := int64(10)
	st, created, err = s.SetStock(ctx, "C-1", orders.StockSet{Available: 4, LowStockThreshold: &five, ExpectedAvailable: &ten}, 2)
	if err != nil || created || st.Available != 4 || st.Stocked != 4 || st.LowStockThreshold == nil || *st.LowStockThreshold != 5 {
		t.Fatalf("a set expecting the stock: %+v %v", st, err)
	}
	if st, err = s.Stock(ctx, "C-1"); err != nil || st.LowStockThreshold == nil || *st.LowStockThreshold != 5 {
		t.Fatalf("read after: %+v %v", st, err)
	}
	if st, _, err = s.SetStock(ctx, "C-1", orders.StockSet{Available: 4}, 3); err != nil || st.LowStockThreshold == nil {
		t.Fatalf("a set without the threshold: %+v %v, want it kept", st, err)
	}
	if st, _, err = s.SetStock(ctx, "C-1", orders.StockSet{Available: 4, LowStockThreshold: &zero}, 4); err != nil || st.LowStockThreshold != nil {
		t.Fatalf("a set of threshold 0: %+v %v, want none", st, err)
	}

	// Two stock-takers read 4 and set at once, without the SKU's lock or a
	// token: the row's lock in the transaction lets exactly one win, the
	// other told the winner's count. Rounds, so that they overlap.
	for round := range 10 {
		have, err := s.Stock(ctx, "C-1")
		if err != nil {
			t.Fatal(err)
		}
		expected := have.Available
		counts := []int64{100 + int64(2*round), 101 + int64(2*round)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, len(counts))
		for i, n := range counts {
			wg.Go(func() {
				<-start
				_, _, errs[i] = s.SetStock(ctx, "C-1", orders.StockSet{Available: n, ExpectedAvailable: &expected}, orders.NoFence)
			})
		}
		close(start)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("round %d: both stock-takers won (expected %d): %v", round, expected, errs)
			case err == nil:
				won = i
			case !errors.Is(err, orders.ErrStaleQuantity):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither won: %v", round, errs)
		}
		lost := errs[1-won]
		if !errors.As(lost, &stale) || stale.Stock.Available != counts[won] {
			t.Fatalf("round %d: the loser was told %+v, want the winner's %d", round, stale, counts[won])
		}
		if st, err := s.Stock(ctx, "C-1"); err != nil || st.Available != counts[won] || st.Stocked != counts[won] {
			t.Fatalf("round %d: stock %+v %v, want the winner's %d", round, st, err, counts[won])
		}
	}
	rebuild(t, skuEvents(t, s, "C-1")) // numbered with no gap, the counters adding up
}

// skuSeq is the number of sku's last event, read from the events.
func skuSeq(t *testing.T, s *gormstore.Store, sku string) int64 {
	t.Helper()
	evs := skuEvents(t, s, sku)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// skuEvents settles the feed and reads sku's events.
func skuEvents(t *testing.T, s *gormstore.Store, sku string) []orders.Event {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Settle(ctx, relay); err != nil {
		t.Fatal(err)
	}
	var out []orders.Event
	for after := int64(0); ; {
		page, err := s.Events(ctx, after, 500)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			if e.SKU == sku {
				out = append(out, e)
			}
		}
		if len(page) < 500 {
			return out
		}
		after = page[len(page)-1].Position
	}
}

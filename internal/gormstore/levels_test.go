package gormstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// wantLevels checks sku's events: numbered 1, 2, 3... with no gap and no
// repeat, in the feed in that order, the last's counters the SKU's, a
// stock-level event changing nothing; with chain, each one's counters its
// predecessor's plus its change. It returns the SKU's event types.
func wantLevels(t *testing.T, s *gormstore.Store, sku string, chain bool) []orders.EventType {
	t.Helper()
	evs := skuEvents(t, s, sku)
	var types []orders.EventType
	var prev orders.Levels
	for i, e := range evs {
		types = append(types, e.Type)
		if e.Seq != int64(i+1) {
			t.Fatalf("%s: event %d (%s) numbered %d", sku, i+1, e.Type, e.Seq)
		}
		if chain && i > 0 && prev.Add(e.Change) != e.Counters {
			t.Errorf("%s: event %d (%s) counters %+v, its predecessor's %+v plus its change %+v", sku, e.Seq, e.Type, e.Counters, prev, e.Change)
		}
		if slices.Contains(orders.LevelEventTypes, e.Type) && (e.Change != orders.Levels{} || e.Location != "") {
			t.Errorf("%s: stock-level event %d: %+v", sku, e.Seq, e)
		}
		prev = e.Counters
	}
	st, err := s.Stock(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	if w := (orders.Levels{Available: st.Available, Reserved: st.Held, Sold: st.Sold, Stocked: st.Stocked}); len(evs) > 0 && prev != w {
		t.Errorf("%s: the last event's counters %+v, the row's %+v", sku, prev, w)
	}
	return types
}

// TestStockLevelEvents makes every kind of write cross (and not cross) the
// levels of one SKU, threshold 3, and checks the events each wrote: a
// sku.low_stock, sku.out_of_stock or sku.back_in_stock exactly once per
// crossing, after the write's change events, none without one, and every
// SKU's events numbered with no gap.
func TestStockLevelEvents(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testStockLevelEvents(t, kind) })
	}
}

func testStockLevelEvents(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	s = s.WithSettleAfter(time.Millisecond)
	ctx := context.Background()
	sweeper := orders.Leader{Name: "job:sweeper", Token: 1}
	const sku = "L-1"
	item := func(n int) orders.Item { return orders.Item{SKU: sku, Quantity: n} }
	var want []orders.EventType
	step := func(what string, write func() error, types ...orders.EventType) {
		t.Helper()
		if err := write(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want = append(want, types...)
		if got := wantLevels(t, s, sku, true); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after %s: events %v\nwant %v", what, got, want)
		}
	}
	set := func(n int64, threshold *int64) func() error {
		return func() error {
			_, _, err := s.SetStock(ctx, sku, orders.StockSet{Available: n, LowStockThreshold: threshold}, orders.NoFence)
			return err
		}
	}
	placed := func(id string, n int) func() error {
		return func() error { _, err := place(s, order(id, item(n)), nil, ""); return err }
	}
	three, ten, zero := int64(3), int64(10), int64(0)
	const (
		low   = orders.EventLowStock
		out   = orders.EventOutOfStock
		back  = orders.EventBackInStock
		setAt = orders.EventStockSet
		sold  = orders.EventOrderPlaced
		held  = orders.EventReservationCreated
		rest  = orders.EventStockRestocked
		ended = orders.EventReservationExpired
	)

	step("a new SKU: no level crossed", set(10, &three), setAt)
	step("an order 10 to 5", placed("o1", 5), sold)
	step("a hold 5 to 3: low", func() error { _, err := hold(s, "h1", time.Second, nil, "", item(2)); return err }, held, low)
	step("an order 3 to 0: out, not low again", placed("o2", 3), sold, out)
	clk.Add(2 * time.Second)
	step("an expiry 0 to 2: back", func() error {
		n, _, err := s.Expire(ctx, []string{"h1"}, nil, sweeper)
		if err == nil && n != 1 {
			err = fmt.Errorf("%d expired", n)
		}
		return err
	}, ended, back)
	step("a cancel 2 to 5: rising through the threshold is no event", func() error {
		_, _, err := s.Cancel(ctx, "o2", nil, clk.Now())
		return err
	}, orders.EventOrderCancelled)
	step("a batch of two orders 5 to 0: low and out, once each, after both", func() error {
		_, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{{Order: order("o3", item(3))}, {Order: order("o4", item(2))}}}, nil)
		return err
	}, sold, sold, low, out)
	step("a restock 0 to 4: back", func() error { _, err := s.Restock(ctx, sku, 4, orders.NoFence); return err }, rest, back)
	step("a hold 4 to 3: low", func() error { _, err := hold(s, "h2", time.Hour, nil, "", item(1)); return err }, held, low)
	step("a sell-out and a give-back in one write, 3 to 1: its net change crosses nothing", func() error {
		_, _, err := s.CommitChanges(ctx, orders.Changes{
			Batch:   orders.Batch{Placed: []orders.Placement{{Order: order("o5", item(3))}}},
			Endings: []orders.Ending{{Release: &orders.Release{HoldID: "h2"}}},
		}, nil)
		return err
	}, sold, orders.EventReservationReleased)
	step("a hold 1 to 0: out; its confirm moves no available: nothing", func() error {
		if _, err := hold(s, "h3", time.Hour, nil, "", item(1)); err != nil {
			return err
		}
		_, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h3", Order: order("o6", item(1))}, nil)
		return err
	}, held, out, orders.EventReservationConfirmed)
	step("a set of the threshold alone crosses nothing", set(0, &ten))
	step("a set 0 to 12: back", set(12, nil), setAt, back)
	step("a set 12 to 10: low (at the threshold is low)", set(10, nil), setAt, low)
	step("a set 10 to 4 already low: nothing", set(4, nil), setAt)
	step("the threshold removed, a set 4 to 20 and to 1: nothing", func() error {
		if err := set(20, &zero)(); err != nil {
			return err
		}
		return set(1, nil)()
	}, setAt, setAt)
	step("a set 1 to 5", set(5, nil), setAt)

	// Another SKU's writes in the same batches number its own events.
	mustRestock(t, s, "L-2", 2, 1)
	if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{
		{Order: order("o7", item(5), orders.Item{SKU: "L-2", Quantity: 2})},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	want = append(want, sold, out)
	if got := wantLevels(t, s, sku, true); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a two-SKU order: %v\nwant %v", got, want)
	}
	if got := wantLevels(t, s, "L-2", true); fmt.Sprint(got) != fmt.Sprint([]orders.EventType{rest, sold, out}) {
		t.Fatalf("L-2: %v", got)
	}

	// The unsafe strategy sets available from what its caller read: its
	// crossings are told from what it overwrote, not from that read (its
	// events' counters do not chain: they say what it meant).
	mustRestock(t, s, "U-1", 1, 1)
	have := map[string]int64{"U-1": 1}
	var wantU []orders.EventType
	for _, w := range []struct {
		id, what string
		have     int64
		types    []orders.EventType
	}{
		{"u1", "1 to 0: out", 1, []orders.EventType{sold, out}},
		{"u2", "of the same unit, 0 to 0: nothing", 1, []orders.EventType{sold}},
		{"u3", "that read 6, 0 to 5: back", 6, []orders.EventType{sold, back}},
	} {
		have["U-1"] = w.have
		if err := s.CommitUnguarded(ctx, orders.Placement{Order: order(w.id, orders.Item{SKU: "U-1", Quantity: 1})}, have); err != nil {
			t.Fatal(err)
		}
		wantU = append(wantU, w.types...)
		if got := wantLevels(t, s, "U-1", false); fmt.Sprint(got) != fmt.Sprint(append([]orders.EventType{rest}, wantU...)) {
			t.Fatalf("after an unguarded order %s: %v, want the restock and %v", w.what, got, wantU)
		}
	}
	for _, e := range skuEvents(t, s, sku) {
		if e.Type == low && e.Quantity != 3 && e.Quantity != 10 {
			t.Errorf("a low_stock event of quantity %d, not the threshold: %+v", e.Quantity, e)
		}
	}
}

// TestStockLevelEventsWithoutEvents: a store with events off writes no
// stock-level event, and its SKUs' event_seq counts their changes only.
func TestStockLevelEventsWithoutEvents(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			on, _ := newStore(t, kind)
			on = on.WithSettleAfter(time.Millisecond)
			off := on.WithoutEvents()
			mustRestock(t, off, "A-1", 1, 1)
			if _, err := place(off, order("o1", orders.Item{SKU: "A-1", Quantity: 1}), nil, ""); err != nil {
				t.Fatal(err) // out of stock, untold
			}
			mustRestock(t, on, "A-1", 1, 2)
			evs := skuEvents(t, on, "A-1")
			if len(evs) != 2 || evs[0].Seq != 3 || evs[0].Type != orders.EventStockRestocked || evs[1].Type != orders.EventBackInStock || evs[1].Seq != 4 {
				t.Fatalf("events: %+v; want the restock numbered 3, then back in stock", evs)
			}
		})
	}
}

package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

func TestStockPerLocation(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("set, restock, compare-and-set", func(t *testing.T) { testLocationSet(t, kind) })
			t.Run("allocation", func(t *testing.T) { testAllocation(t, kind) })
			t.Run("units go back where they came from", func(t *testing.T) { testGiveBack(t, kind) })
			t.Run("transfer", func(t *testing.T) { testTransfer(t, kind) })
		})
	}
}

// addLocation creates a location as POST /v1/locations does.
func addLocation(t *testing.T, s *gormstore.Store, id string, priority int64, active bool) {
	t.Helper()
	if err := s.DB().Exec("INSERT INTO locations (id, name, priority, active, created_at) VALUES (?, ?, ?, ?, ?)",
		id, "Location "+id, priority, active, time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
}

// wantLocations checks a SKU's counts per location, written location:available/reserved/sold.
func wantLocations(t *testing.T, s *gormstore.Store, sku, want string) {
	t.Helper()
	ls, err := s.StockLocations(context.Background(), sku)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, l := range ls {
		got += fmt.Sprintf("%s:%d/%d/%d ", l.Location, l.Available, l.Held, l.Sold)
		if l.Stocked != l.Available+l.Held+l.Sold {
			t.Errorf("%s at %s: I1 broken: %+v", sku, l.Location, l)
		}
	}
	if got != want {
		t.Fatalf("%s's locations: %q, want %q", sku, got, want)
	}
}

// consistent fails the test when the audit, locations included, is not.
func consistent(t *testing.T, s *gormstore.Store) {
	t.Helper()
	if a := mustAudit(t, s); !a.Consistent || a.Oversold != 0 {
		t.Fatalf("audit: %+v", a)
	}
}

func placeWith(s *gormstore.Store, id string, demands []orders.Demand, hold *orders.Hold, items ...orders.Item) (orders.Order, error) {
	ps := []orders.Placement{{Order: order(id, items...), Demands: demands, Hold: hold}}
	_, err := s.Commit(context.Background(), orders.Batch{Placed: ps}, nil)
	return ps[0].Order, err
}

func testLocationSet(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	addLocation(t, s, "berlin", 10, true)
	st, created, err := s.SetLocationStock(ctx, "A-1", "berlin", orders.StockSet{Available: 5}, 1)
	if err != nil || !created || st.Available != 5 || st.Stocked != 5 || len(st.Locations) != 2 {
		t.Fatalf("set in berlin: %+v %v %v", st, created, err)
	}
	wantLocations(t, s, "A-1", "berlin:5/0/0 default:0/0/0 ")
	// A restock that names no location goes to the default one.
	if _, err := s.RestockOnce(ctx, "A-1", 3, 2, orders.Keyed{}); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "A-1", "berlin:5/0/0 default:3/0/0 ")
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 8, Stocked: 8})
	// A stale compare-and-set changes nothing and tells the stock as it is.
	stale := int64(4)
	_, _, err = s.SetLocationStock(ctx, "A-1", "berlin", orders.StockSet{Available: 1, ExpectedAvailable: &stale}, 3)
	var se *orders.StaleQuantityError
	if !errors.As(err, &se) || se.Stock.Available != 5 {
		t.Fatalf("stale set: %v", err)
	}
	right := int64(5)
	if _, _, err := s.SetLocationStock(ctx, "A-1", "berlin", orders.StockSet{Available: 1, ExpectedAvailable: &right}, 4); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "A-1", "berlin:1/0/0 default:3/0/0 ")
	if _, _, err := s.SetLocationStock(ctx, "A-1", "nowhere", orders.StockSet{Available: 1}, 5); !errors.Is(err, orders.ErrUnknownLocation) {
		t.Fatalf("unknown location: %v", err)
	}
	// The SKU's own set changes the default location, never below nothing.
	if _, _, err := s.SetStock(ctx, "A-1", orders.StockSet{Available: 0}, 6); !errors.Is(err, orders.ErrInvalid) {
		t.Fatalf("set below the other locations: %v", err)
	}
	if _, _, err := s.SetStock(ctx, "A-1", orders.StockSet{Available: 2}, 7); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "A-1", "berlin:1/0/0 default:1/0/0 ")
	// A stale fence is refused before anything is read.
	if _, _, err := s.SetLocationStock(ctx, "A-1", "berlin", orders.StockSet{Available: 9}, 7); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("stale fence: %v", err)
	}
	consistent(t, s)
}

func testAllocation(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	addLocation(t, s, "a", 1, true)
	addLocation(t, s, "b", 2, true)
	addLocation(t, s, "off", -5, false)
	mustRestock(t, s, "X", 1, 1) // default: priority 0
	for i, loc := range []string{"a", "b", "off"} {
		if _, _, err := s.SetLocationStock(ctx, "X", loc, orders.StockSet{Available: []int64{2, 5, 9}[i]}, int64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	wantLocations(t, s, "X", "a:2/0/0 b:5/0/0 default:1/0/0 off:9/0/0 ")
	// By priority, split, never from the inactive location.
	o, err := placeWith(s, "o1", nil, nil, orders.Item{SKU: "X", Quantity: 4})
	want := []orders.Allocation{{SKU: "X", Location: "a", Quantity: 2}, {SKU: "X", Location: "b", Quantity: 1}, {SKU: "X", Location: "default", Quantity: 1}}
	if err != nil || !reflect.DeepEqual(o.Allocations, want) {
		t.Fatalf("o1: %+v %v", o.Allocations, err)
	}
	wantLocations(t, s, "X", "a:0/0/2 b:4/0/1 default:0/0/1 off:9/0/0 ")
	// Not split: one location with enough, or none.
	whole := []orders.Demand{{SKU: "X", Quantity: 5, Whole: true}}
	_, err = placeWith(s, "o2", whole, nil, orders.Item{SKU: "X", Quantity: 5})
	var pe *orders.PlacementError
	if !errors.As(err, &pe) || pe.Index != 0 || !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("whole 5 with 4 at most in one active location: %v", err)
	}
	// Two lines of one SKU naming two locations, in the order's opposite order.
	two := []orders.Demand{{SKU: "X", Location: "b", Quantity: 3}, {SKU: "X", Location: "off", Quantity: 1}}
	if _, err := placeWith(s, "o3", two, nil, orders.Item{SKU: "X", Quantity: 4}); !errors.As(err, &pe) {
		t.Fatalf("a line naming an inactive location: %v", err)
	}
	two[1].Location = "nowhere"
	if _, err := placeWith(s, "o3", two, nil, orders.Item{SKU: "X", Quantity: 4}); !errors.Is(err, orders.ErrUnknownLocation) {
		t.Fatalf("a line naming no location there is: %v", err)
	}
	two = []orders.Demand{{SKU: "X", Location: "b", Quantity: 3}, {SKU: "X", Quantity: 1}}
	o, err = placeWith(s, "o3", two, &orders.Hold{TTL: time.Minute}, orders.Item{SKU: "X", Quantity: 4})
	if err != nil || fmt.Sprint(o.Allocations) != "[{X b 4}]" {
		t.Fatalf("o3: %+v %v", o.Allocations, err)
	}
	wantLocations(t, s, "X", "a:0/0/2 b:0/4/1 default:0/0/1 off:9/0/0 ")
	// Most available first.
	ms := s.WithAllocation(orders.AllocateMostAvailable)
	if _, _, err := s.RestockLocation(ctx, "X", "a", 3, 9, orders.Keyed{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RestockLocation(ctx, "X", "default", 2, 10, orders.Keyed{}); err != nil {
		t.Fatal(err)
	}
	o, err = placeWith(ms, "o4", nil, nil, orders.Item{SKU: "X", Quantity: 4})
	if err != nil || fmt.Sprint(o.Allocations) != "[{X a 3} {X default 1}]" {
		t.Fatalf("o4, most available: %+v %v", o.Allocations, err)
	}
	// A batch whose second placement cannot be allocated writes nothing.
	ps := []orders.Placement{{Order: order("o5", orders.Item{SKU: "X", Quantity: 1})},
		{Order: order("o6", orders.Item{SKU: "X", Quantity: 1}), Demands: []orders.Demand{{SKU: "X", Location: "a", Quantity: 1}}}}
	if _, err := s.Commit(ctx, orders.Batch{Placed: ps}, nil); !errors.As(err, &pe) || pe.Index != 1 {
		t.Fatalf("batch: %v", err)
	}
	wantLocations(t, s, "X", "a:0/0/5 b:0/4/1 default:1/0/2 off:9/0/0 ")
	consistent(t, s)
	// A SKU stocked in the default location only: a line naming another
	// location is short there, or unknown.
	mustRestock(t, s, "Y", 5, 1)
	if _, err := placeWith(s, "o7", []orders.Demand{{SKU: "Y", Location: "a", Quantity: 1}}, nil, orders.Item{SKU: "Y", Quantity: 1}); !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("Y at a: %v", err)
	}
	if _, err := placeWith(s, "o7", []orders.Demand{{SKU: "Y", Location: "zz", Quantity: 1}}, nil, orders.Item{SKU: "Y", Quantity: 1}); !errors.Is(err, orders.ErrUnknownLocation) {
		t.Fatalf("Y at zz: %v", err)
	}
	if o, err := placeWith(s, "o7", []orders.Demand{{SKU: "Y", Location: "default", Quantity: 1}}, nil, orders.Item{SKU: "Y", Quantity: 1}); err != nil || o.Allocations != nil {
		t.Fatalf("Y at default: %+v %v", o, err)
	}
	consistent(t, s)
}

func testGiveBack(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	addLocation(t, s, "a", 1, true)
	addLocation(t, s, "b", 2, true)
	// A hold made before the SKU is located holds in the default location.
	mustRestock(t, s, "Z", 4, 1)
	mustHold(t, s, "h0", time.Minute, orders.Item{SKU: "Z", Quantity: 2})
	if _, err := place(s, order("o0", orders.Item{SKU: "Z", Quantity: 1}), nil, ""); err != nil {
		t.Fatal(err)
	}
	for i, loc := range []string{"a", "b"} {
		if _, _, err := s.SetLocationStock(ctx, "Z", loc, orders.StockSet{Available: 3}, int64(2+i)); err != nil {
			t.Fatal(err)
		}
	}
	wantLocations(t, s, "Z", "a:3/0/0 b:3/0/0 default:1/2/1 ")
	mustHold(t, s, "h1", time.Minute, orders.Item{SKU: "Z", Quantity: 5}) // default 1, a 3, b 1; then h2: b 2
	mustHold(t, s, "h2", 2*time.Minute, orders.Item{SKU: "Z", Quantity: 2})
	wantLocations(t, s, "Z", "a:0/3/0 b:0/3/0 default:0/3/1 ")
	// A release gives back where the units were held.
	if _, _, err := s.Release(ctx, "h1", orders.Keyed{}, nil); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "Z", "a:3/0/0 b:1/2/0 default:1/2/1 ")
	// A partial confirm sells where the hold held; the rest goes back there.
	o, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h2", Order: order("o2", orders.Item{SKU: "Z", Quantity: 1})}, nil)
	if err != nil || fmt.Sprint(o.Allocations) != "[{Z b 1}]" {
		t.Fatalf("confirm: %+v %v", o, err)
	}
	wantLocations(t, s, "Z", "a:3/0/0 b:2/0/1 default:1/2/1 ")
	// The old hold and order, of the default location, end there.
	if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h0", Order: order("o3", orders.Item{SKU: "Z", Quantity: 2})}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Cancel(ctx, "o0", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "Z", "a:3/0/0 b:2/0/1 default:2/0/2 ")
	// An expiry, and a cancel of an allocated order.
	mustHold(t, s, "h4", time.Minute, orders.Item{SKU: "Z", Quantity: 4})                         // default 2, a 2
	if _, err := place(s, order("o4", orders.Item{SKU: "Z", Quantity: 2}), nil, ""); err != nil { // a 1, b 1
		t.Fatal(err)
	}
	wantLocations(t, s, "Z", "a:0/2/1 b:1/0/2 default:0/2/2 ")
	clk.Add(90 * time.Second)
	if n, _, err := s.Expire(ctx, []string{"h4"}, nil, orders.Leader{}); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	if _, _, err := s.Cancel(ctx, "o4", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantLocations(t, s, "Z", "a:3/0/0 b:2/0/1 default:2/0/2 ")
	if got, err := s.Order(ctx, "o2"); err != nil || fmt.Sprint(got.Allocations) != "[{Z b 1}]" {
		t.Fatalf("o2 read back: %+v %v", got, err)
	}
	consistent(t, s)
}

func testTransfer(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	ctx := context.Background()
	addLocation(t, s, "a", 1, true)
	if _, err := s.Transfer(ctx, "T", orders.Transfer{From: "default", To: "a", Quantity: 1}, 1, orders.Keyed{}); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("transfer of no SKU: %v", err)
	}
	mustRestock(t, s, "T", 5, 1)
	st, err := s.Transfer(ctx, "T", orders.Transfer{From: "default", To: "a", Quantity: 3}, 2, orders.Keyed{Key: "t1", Hash: "h"})
	if err != nil || st.Available != 5 || st.Stocked != 5 {
		t.Fatalf("transfer: %+v %v", st, err)
	}
	wantLocations(t, s, "T", "a:3/0/0 default:2/0/0 ")
	if _, err := s.Transfer(ctx, "T", orders.Transfer{From: "default", To: "a", Quantity: 3}, 3, orders.Keyed{}); !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("transfer of more than there is: %v", err)
	}
	if _, err := s.Transfer(ctx, "T", orders.Transfer{From: "a", To: "nowhere", Quantity: 1}, 4, orders.Keyed{}); !errors.Is(err, orders.ErrUnknownLocation) {
		t.Fatalf("transfer to nowhere: %v", err)
	}
	if _, err := s.Transfer(ctx, "T", orders.Transfer{From: "a", To: "default", Quantity: 1}, 5, orders.Keyed{Key: "t1", Hash: "h"}); !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("a key recorded: %v", err)
	}
	wantLocations(t, s, "T", "a:3/0/0 default:2/0/0 ")
	consistent(t, s)
}

// Orders sell up to the backorder limit beyond what is available, and no
// more; holds never backorder; a restock fills what is owed first; the
// database refuses a row owing more than its limit.
func TestBackorders(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			s, _ := newStore(t, kind)
			ctx := context.Background()
			mustRestock(t, s, "B", 2, 1)
			if err := s.DB().Exec("UPDATE skus SET backorder_limit = 3 WHERE sku = 'B'").Error; err != nil {
				t.Fatal(err)
			}
			if _, err := place(s, order("o1", orders.Item{SKU: "B", Quantity: 4}), nil, ""); err != nil {
				t.Fatalf("an order 2 beyond what is available, under a limit of 3: %v", err)
			}
			wantStock(t, s, orders.Stock{SKU: "B", Sold: 4, Stocked: 2, BackorderLimit: 3, Backordered: 2})
			if _, err := place(s, order("o2", orders.Item{SKU: "B", Quantity: 2}), nil, ""); !errors.Is(err, orders.ErrInsufficientStock) {
				t.Fatalf("an order past the limit: %v", err)
			}
			if _, err := hold(s, "h1", time.Minute, nil, "", orders.Item{SKU: "B", Quantity: 1}); !errors.Is(err, orders.ErrInsufficientStock) {
				t.Fatalf("a hold of a backordered unit: %v", err)
			}
			if _, err := place(s, order("o3", orders.Item{SKU: "B", Quantity: 1}), nil, ""); err != nil {
				t.Fatal(err)
			}
			if err := s.DB().Exec("UPDATE skus SET available = available - 1 WHERE sku = 'B'").Error; err == nil {
				t.Fatal("the database let a SKU owe more than its limit")
			}
			consistent(t, s)
			// A restock fills the 3 owed first; a cancel gives back.
			if _, err := s.RestockOnce(ctx, "B", 5, 2, orders.Keyed{}); err != nil {
				t.Fatal(err)
			}
			wantStock(t, s, orders.Stock{SKU: "B", Available: 2, Sold: 5, Stocked: 7, BackorderLimit: 3})
			if _, _, err := s.Cancel(ctx, "o1", nil, time.Now()); err != nil {
				t.Fatal(err)
			}
			wantStock(t, s, orders.Stock{SKU: "B", Available: 6, Sold: 1, Stocked: 7, BackorderLimit: 3})
			consistent(t, s)
		})
	}
}

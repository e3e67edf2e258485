package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
)

// A client's caller, with its cap on units held per SKU.
func clientCtx(ctx context.Context, id string, maxHeld int64) context.Context {
	return orders.WithCaller(ctx, orders.Caller{ClientID: id, Scopes: []orders.Scope{orders.ScopeOrdersWrite, orders.ScopeHoldsWrite},
		MaxUnitsHeldPerSKU: maxHeld})
}

// I9 under load: one client's holds of one SKU from three replicas at once
// never hold more than its cap, and hold exactly the cap when the stock
// suffices; a customer's holds and orders of a SKU with a limit never have
// more than the limit, and exactly it; every refusal names the cap. Then units
// come back on a release, a cancel and an expiry, and are taken again.
func TestCapsUnderConcurrency(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newClockWorld(t, kind)
		reps := []*replica{w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const maxHeld, limit, callers = 7, 5, 24
		if _, _, err := reps[0].svc.Restock(ctx, "H", 1000); err != nil {
			t.Fatal(err)
		}
		lim := int64(limit)
		st, _, err := reps[0].svc.SetStock(ctx, "C", orders.StockSet{Available: 1000, MaxPerCustomer: &lim})
		if err != nil || st.MaxPerCustomer == nil || *st.MaxPerCustomer != limit {
			t.Fatalf("set C: %+v %v", st, err)
		}
		c1 := clientCtx(ctx, "c1", maxHeld)
		var heldOK, boughtOK atomic.Int64
		var mu sync.Mutex
		var holdIDs, orderIDs, bobHolds []string
		errs := make(chan error, 2*callers)
		var wg sync.WaitGroup
		for g := range callers {
			svc := reps[g%3].svc
			wg.Go(func() {
				h, err := svc.Hold(c1, orders.HoldRequest{Items: []orders.Item{{SKU: "H", Quantity: 1}}, TTL: time.Minute})
				var capped *orders.CapError
				switch {
				case err == nil:
					heldOK.Add(1)
					mu.Lock()
					holdIDs = append(holdIDs, h.Reservation.ID)
					mu.Unlock()
				case errors.As(err, &capped) && errors.Is(err, orders.ErrHoldQuotaExceeded):
					if capped.SKU != "H" || capped.Limit != maxHeld || capped.Held != maxHeld {
						errs <- fmt.Errorf("refusal %+v: want H, %d held of %d", *capped, maxHeld, maxHeld)
					}
				default:
					errs <- fmt.Errorf("hold: %w", err)
				}
			})
			wg.Go(func() {
				items := []orders.Item{{SKU: "C", Quantity: 1}}
				var id string
				var err error
				if g%2 == 0 {
					var p orders.Placed
					if p, err = svc.Place(c1, orders.PlaceRequest{Items: items, Customer: "bob"}); err == nil {
						id = p.Order.ID
					}
				} else {
					var h orders.Held
					if h, err = svc.Hold(c1, orders.HoldRequest{Items: items, Customer: "bob", TTL: time.Minute}); err == nil {
						id = "hold:" + h.Reservation.ID
					}
				}
				var capped *orders.CapError
				switch {
				case err == nil:
					boughtOK.Add(1)
					mu.Lock()
					if len(id) > 5 && id[:5] == "hold:" {
						bobHolds = append(bobHolds, id[5:])
					} else {
						orderIDs = append(orderIDs, id)
					}
					mu.Unlock()
				case errors.As(err, &capped) && errors.Is(err, orders.ErrCustomerLimitExceeded):
					if capped.SKU != "C" || capped.Limit != limit || capped.Held != limit {
						errs <- fmt.Errorf("refusal %+v: want C, %d of %d", *capped, limit, limit)
					}
				default:
					errs <- fmt.Errorf("customer's: %w", err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if heldOK.Load() != maxHeld || boughtOK.Load() != limit {
			t.Fatalf("%d holds of H accepted (cap %d), %d of bob's C (limit %d)", heldOK.Load(), maxHeld, boughtOK.Load(), limit)
		}
		stockIs := func(sku string, held, sold int64) {
			t.Helper()
			st, err := reps[0].svc.Stock(ctx, sku)
			if err != nil || st.Held != held || st.Sold != sold {
				t.Fatalf("%s: %+v %v; want %d held, %d sold", sku, st, err, held, sold)
			}
		}
		stockIs("H", maxHeld, 0)
		stockIs("C", int64(len(bobHolds)), int64(len(orderIDs)))

		// Another client's bob is another shopper; the admin token has no cap.
		if _, err := reps[1].svc.Place(clientCtx(ctx, "c2", maxHeld), orders.PlaceRequest{Items: []orders.Item{{SKU: "C", Quantity: limit}}, Customer: "bob"}); err != nil {
			t.Fatalf("c2's bob: %v", err)
		}
		if _, err := reps[1].svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "H", Quantity: 50}}}); err != nil {
			t.Fatalf("the admin token's hold: %v", err)
		}

		// A release gives a unit back to c1: one more hold, then none.
		if _, err := reps[2].svc.Release(c1, orders.HoldAction{ID: holdIDs[0]}); err != nil {
			t.Fatal(err)
		}
		wantHold := func(c context.Context, sku, customer string, want error) string {
			t.Helper()
			h, err := reps[0].svc.Hold(c, orders.HoldRequest{Items: []orders.Item{{SKU: sku, Quantity: 1}}, Customer: customer, TTL: time.Minute})
			if !errors.Is(err, want) && (want != nil || err != nil) {
				t.Fatalf("a hold of %s: %v, want %v", sku, err, want)
			}
			return h.Reservation.ID
		}
		wantHold(c1, "H", "", nil)
		wantHold(c1, "H", "", orders.ErrHoldQuotaExceeded)

		// A cancel (an order) or a release (a hold) gives bob a unit back.
		wantHold(c1, "C", "bob", orders.ErrCustomerLimitExceeded)
		if len(orderIDs) > 0 {
			if _, err := reps[1].svc.Cancel(c1, orderIDs[0]); err != nil {
				t.Fatal(err)
			}
		} else if _, err := reps[1].svc.Release(c1, orders.HoldAction{ID: bobHolds[0]}); err != nil {
			t.Fatal(err)
		}
		wantHold(c1, "C", "bob", nil)
		wantHold(c1, "C", "bob", orders.ErrCustomerLimitExceeded)

		// Expiry: every hold of c1 and bob is swept back, and their units are
		// theirs to take again.
		w.clock.Add(2 * time.Minute)
		if _, err := reps[0].svc.Sweep(ctx, leader); err != nil {
			t.Fatal(err)
		}
		for range maxHeld {
			wantHold(c1, "H", "", nil)
		}
		wantHold(c1, "H", "", orders.ErrHoldQuotaExceeded)
		audit, err := reps[0].svc.Audit(ctx, true)
		if err != nil || !audit.Consistent || audit.Caps == nil || audit.Caps.OverLimit != 0 || audit.Caps.Miscounted != 0 {
			t.Fatalf("audit: %+v %v", audit.Caps, err)
		}
	})
}

// In one lock-batch batch, a hold past its client's cap, or an order past
// its customer's limit, is refused on its own, in arrival order: the holds and
// orders beside it, before and after it, commit, and a refusal takes nothing.
func TestCapRefusalIsDecidedAlone(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	two := int64(2)
	for _, sku := range []string{"A", "Z"} {
		if _, _, err := admin.svc.SetStock(ctx, sku, orders.StockSet{Available: 100, MaxPerCustomer: &two}); err != nil {
			t.Fatal(err)
		}
	}
	open := make(chan struct{})
	wanted := make(chan []string, 4)
	r := w.replicaOf(t, orders.StrategyLockBatch, tellingGate{open: open, wanted: wanted, inner: w.locker(t)})
	queued := make(chan int, 16)
	service.OnQueued(r.svc, func(n int) { queued <- n })
	c1 := clientCtx(ctx, "c1", 3)
	hold := func(n int, customer string) func() error {
		return func() error {
			_, err := r.svc.Hold(c1, orders.HoldRequest{Items: items("A", n), Customer: customer})
			return err
		}
	}
	place := func(n int, customer string) func() error {
		return func() error {
			_, err := r.svc.Place(c1, orders.PlaceRequest{Items: items("A", n), Customer: customer})
			return err
		}
	}
	// The first batch locks Z and waits at the gate while the others queue.
	first := inOrder(t, queued, 0, []func() error{func() error {
		_, err := r.svc.Place(ctx, orders.PlaceRequest{Items: items("Z", 1)})
		return err
	}})
	<-wanted
	chs := inOrder(t, queued, 1, []func() error{
		hold(1, ""),     // c1 holds 1 of 3
		hold(3, ""),     // 1+3 > 3: refused
		hold(2, "bob"),  // c1 holds 3; bob has 2 of 2
		hold(1, ""),     // 3+1 > 3: refused
		place(1, "bob"), // bob 2+1 > 2: refused
		place(5, "ann"), // ann has 2 of 2 at most: refused
		place(2, "ann"), // ann 2: placed (orders do not count for c1's cap)
		place(9, ""),    // no customer: placed
	})
	close(open)
	if err := <-first[0]; err != nil {
		t.Fatal(err)
	}
	want := []error{nil, orders.ErrHoldQuotaExceeded, nil, orders.ErrHoldQuotaExceeded, orders.ErrCustomerLimitExceeded,
		orders.ErrCustomerLimitExceeded, nil, nil}
	for i, ch := range chs {
		if err := <-ch; (want[i] == nil) != (err == nil) || !errors.Is(err, want[i]) && want[i] != nil {
			t.Errorf("call %d: %v, want %v", i, err, want[i])
		}
	}
	st, err := r.svc.Stock(ctx, "A")
	if err != nil || st.Held != 3 || st.Sold != 11 || st.Available != 86 {
		t.Fatalf("A: %+v %v; want 3 held, 11 sold", st, err)
	}
	// One transaction under one grant: the four placed share one fence.
	if f := ledgerFences(t, w.dbURL, "A"); len(f) != 5 || f[1] != f[2] || f[2] != f[3] || f[3] != f[4] {
		t.Errorf("A's ledger fences %v; want the set's, then the batch's four under one token", f)
	}
	if a, err := r.svc.Audit(ctx, true); err != nil || !a.Consistent {
		t.Fatalf("audit: %+v %v", a, err)
	}
}

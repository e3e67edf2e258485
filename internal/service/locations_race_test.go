package service_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
)

// The hot SKU H and a second SKU S, each stocked a little in three locations
// (the default one and two the test makes): the stock per location, by SKU.
var locatedStock = map[string]map[string]int64{
	"H": {orders.DefaultLocation: 6, "east": 5, "west": 4},
	"S": {orders.DefaultLocation: 4, "east": 4, "west": 4},
}

// locs are the three locations, in the order lines name them.
var locs = []string{orders.DefaultLocation, "east", "west"}

// skuAt is one SKU in one location.
type skuAt struct{ sku, location string }

// told is what clients were answered, per SKU and location: units sold by
// orders and confirms (net of cancels), and units held by holds.
type told struct {
	mu   sync.Mutex
	sold map[skuAt]int64
	// shapes counts the answers by what was asked and how it was allocated.
	shapes map[string]int
}

func (tl *told) add(allocs []orders.Allocation, sign int64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, a := range allocs {
		tl.sold[skuAt{a.SKU, a.Location}] += sign * a.Quantity
	}
}

func (tl *told) count(shape string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.shapes[shape]++
}

// locatedLines is one request's lines, by shape (0 to 3):
//
//	0: two lines of H naming two locations, in an order that depends on g;
//	1: a line of H and a line of S naming locations, the SKUs in an order
//	   that depends on g (one request's lines name them as another's do, reversed);
//	2: a line of H the service allocates, split as needed (up to 7 units: more
//	   than any location has), and sometimes a line of S;
//	3: a line of H that must not be split, and sometimes an allocated line of S.
func locatedLines(shape, g int, rng *rand.Rand) []orders.Item {
	whole := false
	a, b := locs[rng.IntN(3)], locs[rng.IntN(3)]
	switch shape {
	case 0:
		for b == a {
			b = locs[rng.IntN(3)]
		}
		lines := []orders.Item{{SKU: "H", Quantity: 1, Location: a}, {SKU: "H", Quantity: 1 + rng.IntN(2), Location: b}}
		if g%2 == 1 {
			slices.Reverse(lines)
		}
		return lines
	case 1:
		lines := []orders.Item{{SKU: "H", Quantity: 1, Location: a}, {SKU: "S", Quantity: 1, Location: b}}
		if g%2 == 1 {
			slices.Reverse(lines)
		}
		return lines
	case 2:
		lines := []orders.Item{{SKU: "H", Quantity: 1 + rng.IntN(7)}}
		if rng.IntN(2) == 0 {
			lines = append(lines, orders.Item{SKU: "S", Quantity: 1 + rng.IntN(2)})
		}
		return lines
	default:
		lines := []orders.Item{{SKU: "H", Quantity: 1 + rng.IntN(3), Split: &whole}}
		if rng.IntN(2) == 0 {
			lines = append([]orders.Item{{SKU: "S", Quantity: 1 + rng.IntN(2)}}, lines...)
		}
		return lines
	}
}

// checkAllocated fails the test unless allocs cover lines as they asked: every
// unit of every SKU allocated, a named line's units where it named, and an
// unsplit line of H (shape 3) from one location.
func checkAllocated(t *testing.T, what string, shape int, lines []orders.Item, allocs []orders.Allocation) {
	t.Helper()
	want := map[string]int64{}
	named := map[skuAt]int64{}
	for _, it := range lines {
		want[it.SKU] += int64(it.Quantity)
		if it.Location != "" {
			named[skuAt{it.SKU, it.Location}] += int64(it.Quantity)
		}
	}
	got := map[string]int64{}
	at := map[skuAt]int64{}
	hLocations := 0
	for _, a := range allocs {
		got[a.SKU] += a.Quantity
		at[skuAt{a.SKU, a.Location}] += a.Quantity
		if a.SKU == "H" {
			hLocations++
		}
	}
	switch {
	case !maps.Equal(want, got):
		t.Errorf("%s %v: allocated %v, which is not every unit asked", what, lines, allocs)
	case len(named) > 0 && shape <= 1 && !maps.Equal(named, at):
		t.Errorf("%s %v: allocated %v, not where the lines named", what, lines, allocs)
	case shape == 3 && hLocations != 1:
		t.Errorf("%s %v: the unsplit line of H allocated over %d locations: %v", what, lines, hLocations, allocs)
	}
}

// The ways a hold ends in TestLocatedHotSKUNeverOversells.
const (
	endRelease = iota
	endConfirm
	endConfirmPart
	endExpire
)

var endNames = []string{"released", "confirmed", "confirmed in part", "left to expire"}

// endHold ends hold h (of lines, by shape) through svc as how says, and
// records what the clients were told; false when the request failed for
// another reason than the hold's expiry (fail was called).
func (tl *told) endHold(ctx context.Context, t *testing.T, svc *service.Service, what string, h orders.Reservation, lines []orders.Item, shape, how int,
	fail func(string, error),
) bool {
	t.Helper()
	var err error
	switch how {
	case endRelease:
		_, err = svc.Release(ctx, orders.HoldAction{ID: h.ID})
	case endConfirm:
		var p orders.Placed
		if p, err = svc.Confirm(ctx, orders.ConfirmRequest{ID: h.ID}); err == nil {
			checkAllocated(t, what+": confirm", shape, lines, p.Order.Allocations)
			tl.add(p.Order.Allocations, 1)
		}
	case endConfirmPart:
		var p orders.Placed
		first := h.Items[0]
		if p, err = svc.Confirm(ctx, orders.ConfirmRequest{ID: h.ID, Items: []orders.Item{{SKU: first.SKU, Quantity: 1}}}); err == nil {
			if units(p.Order.Items) != 1 || len(p.Order.Allocations) != 1 || p.Order.Allocations[0].Quantity != 1 ||
				!slices.ContainsFunc(h.Allocations, func(a orders.Allocation) bool {
					return a.SKU == first.SKU && a.Location == p.Order.Allocations[0].Location
				}) {
				t.Errorf("%s: a partial confirm of one unit of %s sold %v, allocated %v; the hold held %v",
					what, first.SKU, p.Order.Items, p.Order.Allocations, h.Allocations)
			}
			tl.add(p.Order.Allocations, 1)
		}
	}
	switch {
	case errors.Is(err, orders.ErrHoldExpired): // the sweeper's clock moved first
		tl.count("hold expired before it was " + endNames[how])
	case err != nil:
		fail(what+": "+endNames[how], err)
		return false
	default:
		tl.count("hold " + endNames[how])
	}
	return true
}

// Orders and holds at once from three replicas on a hot SKU stocked a little
// in three locations: lines of one order naming two locations of one SKU,
// orders naming the same locations in opposite orders, allocated lines split
// and unsplit; holds released, confirmed (whole or in part) and expiring by
// the sweep among them, and orders cancelled. No location sells or holds
// more than it has, at any sampled moment and at the end; what the clients
// were told was sold in each location is what the database counts there; the
// audit, locations included, is consistent; and no request fails for any
// reason but a shortage or a hold that expired first: a deadlock between
// the locations' rows would be an error (PostgreSQL's and MySQL's deadlock
// detection) or the test's deadline.
func TestLocatedHotSKUNeverOversells(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newClockWorld(t, kind)
		reps := []*replica{w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil)}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		for i, id := range locs[1:] {
			if err := reps[0].store.DB().Exec("INSERT INTO locations (id, name, priority, active, created_at) VALUES (?, ?, ?, ?, ?)",
				id, "Location "+id, int64(i+1), true, time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
		}
		for _, sku := range slices.Sorted(maps.Keys(locatedStock)) {
			for _, loc := range locs {
				if _, _, err := reps[0].svc.SetLocationStock(ctx, sku, loc, orders.StockSet{Available: locatedStock[sku][loc]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		tl := &told{sold: map[skuAt]int64{}, shapes: map[string]int{}}
		var deadlocks, failures atomic.Int64
		fail := func(what string, err error) {
			if strings.Contains(strings.ToLower(err.Error()), "deadlock") {
				deadlocks.Add(1)
			}
			failures.Add(1)
			t.Errorf("%s: %v", what, err)
		}

		// Four holds placed first, one of each shape, to be ended one of each
		// way while the orders and holds below race them: so that every way
		// of ending a hold runs during the race, whatever the race's winners.
		const ttl, firstTTL = time.Minute, 20 * time.Minute
		rng := rand.New(rand.NewPCG(0, 41))
		type early struct {
			h     orders.Reservation
			lines []orders.Item
		}
		var first []early
		for shape := range 4 {
			lines := locatedLines(shape, shape, rng)
			lines[0].Quantity = 1 // small: the race must have stock left
			h, err := reps[0].svc.Hold(ctx, orders.HoldRequest{Items: lines, TTL: firstTTL})
			if err != nil {
				t.Fatalf("hold %v: %v", lines, err)
			}
			checkAllocated(t, "the first holds", shape, lines, h.Reservation.Allocations)
			first = append(first, early{h.Reservation, lines})
		}

		// The sweeper: every few holds placed, the clock moves on by half a
		// hold's time and the holds due are expired, and the locations'
		// rows are read for I1 while everything else goes on.
		placed := make(chan struct{}, 1000)
		sweeps := make(chan struct{})
		go func() {
			defer close(sweeps)
			n := 0
			for range placed {
				if n++; n%6 != 0 {
					continue
				}
				w.clock.Add(ttl / 2)
				if _, err := reps[n%3].svc.Sweep(ctx, leader); err != nil {
					fail("sweep", err)
				}
				checkLocationRows(t, reps[0])
			}
		}()

		var wg sync.WaitGroup
		for i, e := range first {
			wg.Go(func() { tl.endHold(ctx, t, reps[i%3].svc, fmt.Sprintf("first hold %d", i), e.h, e.lines, i, i, fail) })
		}
		for g := range 30 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 41))
				svc := reps[g%3].svc
				for i := range 4 {
					shape := (g + i) % 4
					lines := locatedLines(shape, g, rng)
					what := fmt.Sprintf("worker %d op %d", g, i)
					if rng.IntN(2) == 0 {
						p, err := svc.Place(ctx, orders.PlaceRequest{Items: lines})
						switch {
						case errors.Is(err, orders.ErrInsufficientStock):
							tl.count(fmt.Sprintf("order shape %d refused", shape))
							continue
						case err != nil:
							fail(what+": place", err)
							return
						}
						checkAllocated(t, what+": order", shape, lines, p.Order.Allocations)
						tl.count(fmt.Sprintf("order shape %d placed", shape))
						tl.add(p.Order.Allocations, 1)
						if rng.IntN(5) == 0 {
							if _, err := reps[(g+1)%3].svc.Cancel(ctx, p.Order.ID); err != nil {
								fail(what+": cancel", err)
								return
							}
							tl.add(p.Order.Allocations, -1)
							tl.count("order cancelled")
						}
						continue
					}
					h, err := svc.Hold(ctx, orders.HoldRequest{Items: lines, TTL: ttl})
					switch {
					case errors.Is(err, orders.ErrInsufficientStock):
						tl.count(fmt.Sprintf("hold shape %d refused", shape))
						continue
					case err != nil:
						fail(what+": hold", err)
						return
					}
					placed <- struct{}{}
					checkAllocated(t, what+": hold", shape, lines, h.Reservation.Allocations)
					tl.count(fmt.Sprintf("hold shape %d placed", shape))
					if !tl.endHold(ctx, t, reps[(g+1)%3].svc, what, h.Reservation, lines, shape, rng.IntN(4), fail) {
						return
					}
				}
			})
		}
		wg.Wait()
		close(placed)
		<-sweeps

		// Every hold due now, and swept.
		w.clock.Add(firstTTL)
		if _, err := reps[1].svc.Sweep(ctx, leader); err != nil {
			fail("the last sweep", err)
		}
		t.Logf("answers: %v", tl.shapes)
		if n := deadlocks.Load(); n > 0 {
			t.Fatalf("%d requests failed on a deadlock", n)
		}
		if failures.Load() > 0 {
			t.FailNow()
		}
		for i, e := range first {
			r, err := reps[2].svc.Reservation(ctx, e.h.ID)
			want := []orders.HoldStatus{orders.HoldReleased, orders.HoldConfirmed, orders.HoldConfirmed, orders.HoldExpired}[i]
			if err != nil || r.Status != want {
				t.Errorf("the first hold %d (%v): %+v (%v), want %s", i, e.lines, r, err, want)
			}
		}

		a := mustAudit(t, reps[0])
		checkLocationRows(t, reps[0])
		for _, s := range a.SKUs {
			if len(s.Locations) != len(locs) {
				t.Errorf("%s: the audit has locations %+v, want %d", s.SKU, s.Locations, len(locs))
			}
			var sold int64
			for _, l := range s.Locations {
				if l.Held != 0 {
					t.Errorf("%s at %s: %d units still reserved after every hold ended", s.SKU, l.Location, l.Held)
				}
				if want := locatedStock[s.SKU][l.Location]; l.Stocked != want {
					t.Errorf("%s at %s: stocked %d, the test stocked %d", s.SKU, l.Location, l.Stocked, want)
				}
				if got := tl.sold[skuAt{s.SKU, l.Location}]; got != l.Sold {
					t.Errorf("%s at %s: clients were told %d units were sold there, the database says %d", s.SKU, l.Location, got, l.Sold)
				}
				sold += l.Sold
			}
			if sold != s.Sold {
				t.Errorf("%s: sold %d in its locations, %d in all", s.SKU, sold, s.Sold)
			}
		}
	})
}

// checkLocationRows reads every SKU's counts per location, each row as one
// statement reads it, and fails the test unless each holds I1 on its own:
// stocked == available + reserved + sold, none negative, and so never more
// sold and reserved than stocked.
func checkLocationRows(t *testing.T, r *replica) {
	t.Helper()
	var rows []struct {
		SKU, Location                      string
		Available, Reserved, Sold, Stocked int64
	}
	if err := r.store.DB().Raw("SELECT sku, location, available, reserved, sold, stocked FROM sku_locations").Scan(&rows).Error; err != nil {
		t.Error(err)
		return
	}
	if len(rows) == 0 {
		t.Error("no SKU has rows per location")
	}
	for _, l := range rows {
		if l.Stocked != l.Available+l.Reserved+l.Sold || l.Available < 0 || l.Reserved < 0 || l.Sold < 0 {
			t.Errorf("I1 at %s of %s: %+v", l.Location, l.SKU, l)
		}
	}
}

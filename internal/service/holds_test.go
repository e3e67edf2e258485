package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/skulock"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// newClockWorld is a world whose replicas share a test clock.
func newClockWorld(t *testing.T, kind string) *world {
	w := newWorld(t, kind)
	w.clock = testenv.NewClock(time.Now().UTC())
	return w
}

var leader = orders.Leader{Name: service.SweeperLease, Token: 1}

// Holds and orders at once from three replicas never take more than there is;
// then confirms (two at once for the same hold), partial confirms and releases
// end each hold one way, and the sweep returns the rest (I1, I6, I7).
func TestHoldsNeverOversellAndEndOnce(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newClockWorld(t, kind)
		reps := []*replica{w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil), w.replicaOf(t, strategy, nil)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stock := map[string]int64{"A": 30, "B": 10}
		for sku, n := range stock {
			if _, _, err := reps[0].svc.Restock(ctx, sku, n); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var holds []orders.Reservation
		var ordered atomic.Int64
		var wg sync.WaitGroup
		for g := range 40 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 14))
				for range 3 {
					items := []orders.Item{{SKU: "A", Quantity: 1 + rng.IntN(2)}}
					if rng.IntN(3) == 0 {
						items = append(items, orders.Item{SKU: "B", Quantity: 1})
					}
					svc := reps[g%3].svc
					if g%4 == 0 {
						p, err := svc.Place(ctx, orders.PlaceRequest{Items: items})
						if err == nil {
							ordered.Add(units(p.Order.Items))
						} else if !errors.Is(err, orders.ErrInsufficientStock) {
							t.Error(err)
						}
						continue
					}
					h, err := svc.Hold(ctx, orders.HoldRequest{Items: items, TTL: time.Minute})
					if errors.Is(err, orders.ErrInsufficientStock) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					holds = append(holds, h.Reservation)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		mustAudit(t, reps[0])
		if len(holds) < 6 {
			t.Fatalf("only %d holds made", len(holds))
		}
		slices.SortFunc(holds, func(a, b orders.Reservation) int { return compare(a.ID, b.ID) })

		confirmedUnits := atomic.Int64{}
		for i, h := range holds {
			switch i % 4 {
			case 0: // confirmed twice at once, through two replicas: one order
				ids := make([]string, 2)
				for j := range 2 {
					wg.Go(func() {
						p, err := reps[j].svc.Confirm(ctx, orders.ConfirmRequest{ID: h.ID})
						if err != nil {
							t.Errorf("confirm %s: %v", h.ID, err)
							return
						}
						ids[j] = p.Order.ID
					})
				}
				wg.Wait()
				if ids[0] != ids[1] || ids[0] == "" {
					t.Fatalf("hold %s confirmed into %v", h.ID, ids)
				}
				confirmedUnits.Add(units(h.Items))
			case 1: // a partial confirm: one unit of the first SKU
				p, err := reps[1].svc.Confirm(ctx, orders.ConfirmRequest{ID: h.ID, Items: []orders.Item{{SKU: h.Items[0].SKU, Quantity: 1}}})
				if err != nil || units(p.Order.Items) != 1 || p.Order.ReservationID != h.ID {
					t.Fatalf("partial confirm: %+v %v", p, err)
				}
				confirmedUnits.Add(1)
			case 2:
				r, err := reps[2].svc.Release(ctx, orders.HoldAction{ID: h.ID})
				if err != nil || r.Reservation.Status != orders.HoldReleased {
					t.Fatalf("release: %+v %v", r, err)
				}
				if _, err := reps[0].svc.Confirm(ctx, orders.ConfirmRequest{ID: h.ID}); !errors.Is(err, orders.ErrHoldReleased) {
					t.Fatalf("confirm of a released hold: %v", err)
				}
			}
		}
		mustAudit(t, reps[0])

		w.clock.Add(time.Minute) // the rest are due now
		if _, err := reps[0].svc.Confirm(ctx, orders.ConfirmRequest{ID: holds[3].ID}); !errors.Is(err, orders.ErrHoldExpired) {
			t.Fatalf("confirm of an expired hold: %v", err)
		}
		n, err := reps[0].svc.Sweep(ctx, leader)
		if err != nil || n != (len(holds)+0)/4 {
			t.Fatalf("swept %d (%v) of %d holds, want a quarter", n, err, len(holds))
		}
		a := mustAudit(t, reps[0])
		var sold int64
		for _, s := range a.SKUs {
			if s.Held != 0 {
				t.Errorf("%s: %d units still reserved after the sweep", s.SKU, s.Held)
			}
			sold += s.Sold
		}
		if want := ordered.Load() + confirmedUnits.Load(); sold != want {
			t.Errorf("sold %d, but clients were told of %d (orders and confirmed units)", sold, want)
		}
		for i, h := range holds {
			r, err := reps[1].svc.Reservation(ctx, h.ID)
			want := []orders.HoldStatus{orders.HoldConfirmed, orders.HoldConfirmed, orders.HoldReleased, orders.HoldExpired}[i%4]
			if err != nil || r.Status != want || (r.OrderID != "") != (want == orders.HoldConfirmed) || r.EndedAt == nil {
				t.Errorf("hold %d: %+v (%v), want %s", i, r, err, want)
			}
		}
	})
}

func units(items []orders.Item) int64 {
	var n int64
	for _, it := range items {
		n += int64(it.Quantity)
	}
	return n
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mustAudit(t *testing.T, r *replica) orders.Audit {
	t.Helper()
	a, err := r.svc.Audit(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Consistent || a.Oversold != 0 {
		t.Fatalf("I1 broken: %+v", a)
	}
	return a
}

// Keys replay holds, confirms and releases, and a key used for one kind of
// request is a mismatch for another.
func TestHoldIdempotency(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		w := newClockWorld(t, kind)
		r := w.replica(t, nil)
		ctx := context.Background()
		if _, _, err := r.svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		req := orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}, IdempotencyKey: "h1"}
		first, err := r.svc.Hold(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := r.svc.Hold(ctx, req)
		if err != nil || !again.Replayed || again.Reservation.ID != first.Reservation.ID || !again.Reservation.ExpiresAt.Equal(first.Reservation.ExpiresAt) {
			t.Fatalf("replay: %+v %v, first %+v", again, err, first)
		}
		refusedBefore := r.obs.refused.Load()
		if _, err := r.svc.Hold(ctx, orders.HoldRequest{Items: req.Items, TTL: time.Hour, IdempotencyKey: "h1"}); !errors.Is(err, orders.ErrIdempotencyMismatch) {
			t.Fatalf("another TTL under the key: %v", err)
		}
		if _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: req.Items, IdempotencyKey: "h1"}); !errors.Is(err, orders.ErrIdempotencyMismatch) {
			t.Fatalf("an order under a hold's key: %v", err)
		}
		if n := r.obs.refused.Load() - refusedBefore; n != 0 { // the client's mistake, not the service's
			t.Fatalf("a reused key counted as %d refusals", n)
		}
		id := first.Reservation.ID
		// An empty list of units confirms nothing: refused, the hold left as it was.
		if _, err := r.svc.Confirm(ctx, orders.ConfirmRequest{ID: id, Items: []orders.Item{}}); !errors.Is(err, orders.ErrInvalid) {
			t.Fatalf("a confirm of an empty list: %v, want invalid", err)
		}
		if st, _ := r.svc.Stock(ctx, "A"); st.Sold != 0 || st.Held != 2 {
			t.Fatalf("after a refused empty confirm: %+v", st)
		}
		c1, err := r.svc.Confirm(ctx, orders.ConfirmRequest{ID: id, IdempotencyKey: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		c2, err := r.svc.Confirm(ctx, orders.ConfirmRequest{ID: id, IdempotencyKey: "c1"})
		if err != nil || !c2.Replayed || c2.Order.ID != c1.Order.ID {
			t.Fatalf("confirm replay: %+v %v", c2, err)
		}
		// Another unit count for a confirmed hold is refused, not replayed.
		if _, err := r.svc.Confirm(ctx, orders.ConfirmRequest{ID: id, Items: []orders.Item{{SKU: "A", Quantity: 1}}}); !errors.Is(err, orders.ErrHoldConfirmed) {
			t.Fatalf("a different confirm of a confirmed hold: %v", err)
		}
		h2, err := r.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		rel := orders.HoldAction{ID: h2.Reservation.ID, IdempotencyKey: "r1"}
		if _, err := r.svc.Release(ctx, rel); err != nil {
			t.Fatal(err)
		}
		if again, err := r.svc.Release(ctx, rel); err != nil || !again.Replayed || again.Reservation.Status != orders.HoldReleased {
			t.Fatalf("release replay: %+v %v", again, err)
		}
		if _, err := r.svc.Release(ctx, orders.HoldAction{ID: h2.Reservation.ID}); !errors.Is(err, orders.ErrHoldReleased) {
			t.Fatalf("a second release without the key: %v", err)
		}
		if st, _ := r.svc.Stock(ctx, "A"); st.Available != 3 || st.Sold != 2 || st.Held != 0 {
			t.Fatalf("stock %+v", st)
		}
	})
}

// A sweep under an older lease token than the last one the database saw is
// refused and counted, and changes nothing.
func TestStaleSweeperIsRefused(t *testing.T) {
	w := newClockWorld(t, testenv.DatabaseKinds()[0])
	r := w.replica(t, nil)
	ctx := context.Background()
	if _, _, err := r.svc.Restock(ctx, "A", 5); err != nil {
		t.Fatal(err)
	}
	hold := func() {
		if _, err := r.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		w.clock.Add(time.Second)
	}
	hold()
	if n, err := r.svc.Sweep(ctx, orders.Leader{Name: service.SweeperLease, Token: 5}); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	hold()
	if n, err := r.svc.Sweep(ctx, orders.Leader{Name: service.SweeperLease, Token: 3}); !errors.Is(err, orders.ErrStaleLeader) || n != 0 {
		t.Fatalf("a former leader's sweep: %d %v", n, err)
	}
	if got := r.obs.sweepRefused.Load(); got != 1 {
		t.Fatalf("%d refusals counted, want 1", got)
	}
	if st, _ := r.svc.Stock(ctx, "A"); st.Held != 1 || st.Available != 4 {
		t.Fatalf("stock %+v after a refused sweep", st)
	}
}

// Every replica runs the sweeper; one leads at a time, it sweeps, and when it
// stops another takes over.
func TestSweeperLeadsOncePerCluster(t *testing.T) {
	w := newClockWorld(t, testenv.DatabaseKinds()[0])
	w.sweep = 20 * time.Millisecond
	type event struct {
		replica int
		leads   bool
	}
	events := make(chan event, 64)
	expired := make(chan int, 64)
	var leaders, most atomic.Int64
	var reps []*replica
	var stops []context.CancelFunc
	var wg sync.WaitGroup
	for i := range 3 {
		lc, err := redislease.NewClient(w.redis.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: w.redis.Namespace}}, &lock.Options{TTL: time.Second, Wait: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = lc.Close() })
		r := w.replica(t, nil)
		r.obs.onLeading = func(b bool) {
			if b {
				most.Store(max(most.Load(), leaders.Add(1)))
			} else {
				leaders.Add(-1)
			}
			events <- event{i, b}
		}
		r.obs.onExpired = func(n int) { expired <- n }
		r.deps.Leader = skulock.NewLocker(lc, orders.DependencyRedis)
		r.svc = service.New(service.Config{SweepInterval: w.sweep}, r.deps, slog.New(slog.NewTextHandler(io.Discard, nil)), w.clock.Now)
		ctx, stop := context.WithCancel(context.Background())
		stops = append(stops, stop)
		reps = append(reps, r)
		wg.Go(func() { r.svc.RunSweeper(ctx) })
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
		wg.Wait()
	}()
	next := func(want bool) event {
		t.Helper()
		select {
		case e := <-events:
			if e.leads != want {
				t.Fatalf("event %+v, want leads=%v", e, want)
			}
			return e
		case <-time.After(15 * time.Second):
			t.Fatalf("no sweeper event (leads=%v) in 15s", want)
		}
		return event{}
	}
	first := next(true)
	ctx := context.Background()
	if _, _, err := reps[0].svc.Restock(ctx, "A", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := reps[0].svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	w.clock.Add(time.Minute)
	select {
	case n := <-expired:
		if n != 1 {
			t.Fatalf("expired %d, want 1", n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the hold was not swept in 15s")
	}
	if st, _ := reps[0].svc.Stock(ctx, "A"); st.Held != 0 || st.Available != 5 {
		t.Fatalf("stock %+v after the sweep", st)
	}
	stops[first.replica]()
	if e := next(false); e.replica != first.replica {
		t.Fatalf("replica %d stopped leading, want %d", e.replica, first.replica)
	}
	if second := next(true); second.replica == first.replica {
		t.Fatalf("replica %d leads again after it stopped", second.replica)
	}
	if got := most.Load(); got != 1 {
		t.Fatalf("%d replicas led at once", got)
	}
}

// A leader whose lease token is below the last one the database saw (Redis
// lost its counter: a restart, a failover) still holds the lease: it advances
// its token past the database's and sweeps, rather than giving up for good.
func TestSweeperAdvancesPastALargerToken(t *testing.T) {
	w := newClockWorld(t, testenv.DatabaseKinds()[0])
	w.sweep = 20 * time.Millisecond
	r := w.replica(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What a leader before the Redis restart wrote: far above what Redis issues now.
	if _, err := r.store.PurgeRecords(ctx, w.clock.Now(), 1, orders.Leader{Name: service.SweeperLease, Token: 1 << 62}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.svc.Restock(ctx, "A", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Hold(ctx, orders.HoldRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	w.clock.Add(time.Second)
	expired := make(chan int, 8)
	r.obs.onExpired = func(n int) { expired <- n }
	r.svc = service.New(service.Config{SweepInterval: w.sweep}, r.deps, slog.New(slog.NewTextHandler(io.Discard, nil)), w.clock.Now)
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.svc.RunSweeper(sctx) })
	defer func() { stop(); wg.Wait() }()
	select {
	case n := <-expired:
		if n != 1 {
			t.Fatalf("expired %d, want 1", n)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("not swept in 15s: the leader did not advance past the database's token")
	}
	if got := r.obs.sweepRefused.Load(); got < 1 {
		t.Fatalf("%d refusals counted, want the first sweep's", got)
	}
}

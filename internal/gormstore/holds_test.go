package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

func TestHolds(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("hold, confirm, release", func(t *testing.T) { testHoldConfirmRelease(t, kind) })
			t.Run("partial confirm", func(t *testing.T) { testPartialConfirm(t, kind) })
			t.Run("expiry and the sweeper's lease", func(t *testing.T) { testExpiry(t, kind) })
			t.Run("the database's clock", func(t *testing.T) { testDatabaseClock(t, kind) })
			t.Run("confirm racing expiry", func(t *testing.T) { testConfirmRacesExpiry(t, kind) })
			t.Run("many endings in one transaction", func(t *testing.T) { testEndMany(t, kind) })
		})
	}
}

// newHoldStore is newStore deciding expiry on the test's clock.
func newHoldStore(t *testing.T, kind string) (*gormstore.Store, *testenv.Clock) {
	s, clk := newStore(t, kind)
	return s.WithClock(clk.Now), clk
}

func hold(s *gormstore.Store, id string, ttl time.Duration, fences orders.Fences, key string, items ...orders.Item) (*orders.Hold, error) {
	h := &orders.Hold{TTL: ttl}
	_, err := s.Commit(context.Background(), orders.Batch{Placed: []orders.Placement{{Order: order(id, items...), Hold: h, Key: key, Hash: "h-" + key}}}, fences)
	return h, err
}

func mustHold(t *testing.T, s *gormstore.Store, id string, ttl time.Duration, items ...orders.Item) *orders.Hold {
	t.Helper()
	h, err := hold(s, id, ttl, nil, "", items...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func wantStatus(t *testing.T, s *gormstore.Store, id string, want orders.HoldStatus) orders.Reservation {
	t.Helper()
	r, err := s.Reservation(context.Background(), id)
	if err != nil || r.Status != want {
		t.Fatalf("hold %s: %+v (%v), want status %s", id, r, err, want)
	}
	return r
}

func wantEnded(t *testing.T, err error, want error) {
	t.Helper()
	var ended *orders.HoldEndedError
	if !errors.Is(err, want) || !errors.As(err, &ended) {
		t.Fatalf("got %v, want %v", err, want)
	}
}

func testHoldConfirmRelease(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 5, 1)
	mustRestock(t, s, "B-2", 2, 1)

	h, err := hold(s, "h1", 10*time.Minute, orders.Fences{"A-1": 2, "B-2": 2}, "k1", orders.Item{SKU: "A-1", Quantity: 3}, orders.Item{SKU: "B-2", Quantity: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(10 * time.Minute).Truncate(time.Millisecond); !h.ExpiresAt.Equal(want) {
		t.Fatalf("expires at %v, want %v", h.ExpiresAt, want)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 2, Held: 3, Stocked: 5})
	wantStock(t, s, orders.Stock{SKU: "B-2", Available: 0, Held: 2, Stocked: 2})
	r := wantStatus(t, s, "h1", orders.HoldHeld)
	if fmt.Sprint(r.Items) != "[{A-1 3} {B-2 2}]" || !r.ExpiresAt.Equal(h.ExpiresAt) {
		t.Fatalf("read back %+v", r)
	}
	// Nothing is held when one line is short.
	if _, err := hold(s, "h2", time.Minute, nil, "", orders.Item{SKU: "A-1", Quantity: 1}, orders.Item{SKU: "B-2", Quantity: 1}); !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("hold of a sold-out SKU: %v", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 2, Held: 3, Stocked: 5})
	if recs, err := s.Outcomes(ctx, []string{"k1"}); err != nil || recs["k1"].Outcome.ReservationID != "h1" {
		t.Fatalf("record %+v (%v)", recs, err)
	}

	// Confirm: reserved to sold, never checked against available (0 for B-2).
	o, after, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o1"), Key: "c1", Hash: "hc1"}, orders.Fences{"A-1": 3, "B-2": 3})
	if err != nil {
		t.Fatal(err)
	}
	if o.ReservationID != "h1" || fmt.Sprint(o.Items) != "[{A-1 3} {B-2 2}]" || after["A-1"] != 2 || after["B-2"] != 0 {
		t.Fatalf("confirmed %+v, after %v", o, after)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 2, Sold: 3, Stocked: 5})
	wantStock(t, s, orders.Stock{SKU: "B-2", Sold: 2, Stocked: 2})
	if got, err := s.Order(ctx, "o1"); err != nil || got.ReservationID != "h1" || fmt.Sprint(got.Items) != "[{A-1 3} {B-2 2}]" {
		t.Fatalf("order %+v (%v)", got, err)
	}
	if r := wantStatus(t, s, "h1", orders.HoldConfirmed); r.OrderID != "o1" || r.EndedAt == nil {
		t.Fatalf("confirmed hold %+v", r)
	}
	// At most once: a second confirm, a release and an extension are refused and change nothing.
	_, _, err = s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o2")}, orders.Fences{"A-1": 4, "B-2": 4})
	wantEnded(t, err, orders.ErrHoldConfirmed)
	var ended *orders.HoldEndedError
	if errors.As(err, &ended); ended.OrderID != "o1" {
		t.Fatalf("ended %+v", ended)
	}
	_, _, err = s.Release(ctx, "h1", orders.Keyed{}, orders.Fences{"A-1": 4, "B-2": 4})
	wantEnded(t, err, orders.ErrHoldConfirmed)
	_, _, err = s.Extend(ctx, "h1", time.Hour, orders.Keyed{})
	wantEnded(t, err, orders.ErrHoldConfirmed)
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 2, Sold: 3, Stocked: 5})

	// Release: units back to available; then confirm is refused.
	mustHold(t, s, "h3", time.Minute, orders.Item{SKU: "A-1", Quantity: 2})
	// A stale fence is refused, and changes nothing.
	if _, _, err := s.Release(ctx, "h3", orders.Keyed{}, orders.Fences{"A-1": 3}); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("stale release: %v", err)
	}
	r, after, err = s.Release(ctx, "h3", orders.Keyed{Key: "r3", Hash: "hr3"}, orders.Fences{"A-1": 5})
	if err != nil || r.Status != orders.HoldReleased || after["A-1"] != 2 {
		t.Fatalf("release: %+v %v %v", r, after, err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 2, Sold: 3, Stocked: 5})
	_, _, err = s.Confirm(ctx, orders.Confirmation{HoldID: "h3", Order: order("o3")}, nil)
	wantEnded(t, err, orders.ErrHoldReleased)
	if _, _, err := s.Release(ctx, "nope", orders.Keyed{}, nil); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("release of no hold: %v", err)
	}
	// The key is recorded in the release's transaction: used again, it conflicts.
	mustHold(t, s, "h4", time.Minute, orders.Item{SKU: "A-1", Quantity: 1})
	if _, _, err := s.Release(ctx, "h4", orders.Keyed{Key: "r3", Hash: "hr3"}, nil); !errors.Is(err, orders.ErrIdempotencyConflict) {
		t.Fatalf("release under a recorded key: %v", err)
	}
	wantStatus(t, s, "h4", orders.HoldHeld)
	wantAudit(t, s)
}

func testPartialConfirm(t *testing.T, kind string) {
	s, _ := newHoldStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 5, 1)
	mustRestock(t, s, "B-2", 5, 1)
	mustHold(t, s, "h1", time.Minute, orders.Item{SKU: "A-1", Quantity: 3}, orders.Item{SKU: "B-2", Quantity: 2})
	for _, items := range [][]orders.Item{
		{{SKU: "A-1", Quantity: 4}}, // more than held
		{{SKU: "C-3", Quantity: 1}}, // not held
	} {
		if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o1", items...)}, nil); !errors.Is(err, orders.ErrInvalid) {
			t.Fatalf("confirm %v: %v", items, err)
		}
	}
	wantStatus(t, s, "h1", orders.HoldHeld)
	// Two of A-1 and none of B-2: the rest is back at once.
	o, after, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o1", orders.Item{SKU: "A-1", Quantity: 2})}, nil)
	if err != nil || fmt.Sprint(o.Items) != "[{A-1 2}]" || after["A-1"] != 3 || after["B-2"] != 5 {
		t.Fatalf("partial confirm: %+v %v %v", o, after, err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5})
	wantStock(t, s, orders.Stock{SKU: "B-2", Available: 5, Stocked: 5})
	wantAudit(t, s)
}

func testExpiry(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 10, 1)
	mustHold(t, s, "late", 3*time.Second, orders.Item{SKU: "A-1", Quantity: 1})
	mustHold(t, s, "early", time.Second, orders.Item{SKU: "A-1", Quantity: 2})
	mustHold(t, s, "kept", time.Second, orders.Item{SKU: "A-1", Quantity: 3})
	if due, err := s.Expired(ctx, 10); err != nil || len(due) != 0 {
		t.Fatalf("expired before their time: %+v %v", due, err)
	}
	// An extension moves the expiry, never earlier.
	r, moved, err := s.Extend(ctx, "kept", time.Hour, orders.Keyed{Key: "x1", Hash: "hx1"})
	if err != nil || !moved || !r.ExpiresAt.Equal(clk.Now().Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("extend: %+v moved %v, %v", r, moved, err)
	}
	if r, moved, err := s.Extend(ctx, "kept", time.Second, orders.Keyed{}); err != nil || moved || !r.ExpiresAt.Equal(clk.Now().Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("a shorter extension: %+v moved %v, %v; want the expiry kept, and said so", r, moved, err)
	}

	clk.Add(time.Second) // early expires at this very instant
	wantStatus(t, s, "early", orders.HoldExpired)
	wantStatus(t, s, "late", orders.HoldHeld)
	_, _, err = s.Confirm(ctx, orders.Confirmation{HoldID: "early", Order: order("o1")}, nil)
	wantEnded(t, err, orders.ErrHoldExpired)
	_, _, err = s.Extend(ctx, "early", time.Hour, orders.Keyed{})
	wantEnded(t, err, orders.ErrHoldExpired)
	_, _, err = s.Release(ctx, "early", orders.Keyed{}, nil)
	wantEnded(t, err, orders.ErrHoldExpired)
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 4, Held: 6, Stocked: 10}) // not swept yet

	clk.Add(5 * time.Second)
	// I6: both are overdue past a grace of a second, neither within ten.
	if a, err := s.HoldAudit(ctx, time.Second, false); err != nil || a.Overdue != 2 || a.Stray != -1 {
		t.Fatalf("hold audit: %+v %v", a, err)
	}
	if a, err := s.HoldAudit(ctx, 10*time.Second, true); err != nil || a.Overdue != 0 || a.Stray != 0 {
		t.Fatalf("hold audit: %+v %v", a, err)
	}
	due, err := s.Expired(ctx, 10)
	if err != nil || len(due) != 2 || due[0].ID != "early" || due[1].ID != "late" {
		t.Fatalf("expired, earliest first: %+v %v", due, err)
	}
	ids := []string{"early", "late", "kept"} // kept is not due: left be
	n, after, err := s.Expire(ctx, ids, orders.Fences{"A-1": 2}, orders.Leader{Name: "sweeper", Token: 7})
	if err != nil || n != 2 || after["A-1"] != 7 {
		t.Fatalf("expire: %d %v %v", n, after, err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 7, Held: 3, Stocked: 10})
	wantStatus(t, s, "kept", orders.HoldHeld)
	// Swept once: a repeat (the same leader, a later grant) expires nothing more.
	if n, _, err := s.Expire(ctx, ids, orders.Fences{"A-1": 3}, orders.Leader{Name: "sweeper", Token: 7}); err != nil || n != 0 {
		t.Fatalf("expire again: %d %v", n, err)
	}
	// A former leader's write is refused, whatever its per-SKU token.
	clk.Add(2 * time.Hour)
	if _, _, err := s.Expire(ctx, ids, orders.Fences{"A-1": 9}, orders.Leader{Name: "sweeper", Token: 6}); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale leader's expiry: %v", err)
	}
	if _, err := s.PurgeRecords(ctx, clk.Now(), 10, orders.Leader{Name: "sweeper", Token: 6}); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale leader's purge: %v", err)
	}
	wantStatus(t, s, "kept", orders.HoldExpired)
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 7, Held: 3, Stocked: 10})
	if n, _, err := s.Expire(ctx, ids, orders.Fences{"A-1": 10}, orders.Leader{Name: "sweeper", Token: 8}); err != nil || n != 1 {
		t.Fatalf("a newer leader: %d %v", n, err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 10, Stocked: 10})
	wantAudit(t, s)
	// I7: an order of an expired hold is stray.
	if err := s.DB().Exec("INSERT INTO orders (id, status, created_at, reservation_id) VALUES ('stray', 'placed', ?, 'early')", clk.Now()).Error; err != nil {
		t.Fatal(err)
	}
	if a, err := s.HoldAudit(ctx, time.Second, true); err != nil || a.Stray != 1 {
		t.Fatalf("hold audit with a stray order: %+v %v", a, err)
	}
}

// Expiry is decided on the database's clock, whatever the replica's says.
func testDatabaseClock(t *testing.T, kind string) {
	if kind == "sqlite" {
		t.Skip("SQLite's clock is this machine's")
	}
	s, clk := newStore(t, kind) // expiry on the database's clock, timestamps on clk's
	ctx := context.Background()
	clk.Add(-48 * time.Hour) // a replica whose clock is two days late
	mustRestock(t, s, "A-1", 1, 1)
	h := mustHold(t, s, "h1", time.Hour, orders.Item{SKU: "A-1", Quantity: 1})
	if d := time.Until(h.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("expires in %v, want an hour from the database's now", d)
	}
	wantStatus(t, s, "h1", orders.HoldHeld)
	if due, err := s.Expired(ctx, 10); err != nil || len(due) != 0 {
		t.Fatalf("expired by the replica's clock: %+v %v", due, err)
	}
}

// Confirms and expiries of the same holds at once, as a sweeper that lost its
// locks would race a buyer: each hold ends one way, and the counters agree.
func testConfirmRacesExpiry(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	const holds = 40
	mustRestock(t, s, "A-1", holds, 1)
	var ids []string
	for i := range holds {
		id := fmt.Sprintf("h%02d", i)
		mustHold(t, s, id, time.Second, orders.Item{SKU: "A-1", Quantity: 1})
		ids = append(ids, id)
	}
	clk.Add(time.Second - time.Millisecond) // due in a millisecond
	var wg sync.WaitGroup
	var mu sync.Mutex
	confirmed := 0
	for i, id := range ids {
		wg.Go(func() {
			_, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: id, Order: order("o-" + id)}, nil)
			if err == nil {
				mu.Lock()
				confirmed++
				mu.Unlock()
			} else if !errors.Is(err, orders.ErrHoldExpired) {
				t.Error(err)
			}
		})
		if i == holds/2 {
			clk.Add(time.Millisecond) // the rest are due
		}
	}
	wg.Go(func() {
		if _, _, err := s.Expire(ctx, ids, nil, orders.Leader{}); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	if _, _, err := s.Expire(ctx, ids, nil, orders.Leader{}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stock(ctx, "A-1")
	if err != nil || st.Sold != int64(confirmed) || st.Available != int64(holds-confirmed) || st.Held != 0 {
		t.Fatalf("stock %+v (%v) after %d confirms", st, err, confirmed)
	}
	for _, id := range ids {
		r, err := s.Reservation(ctx, id)
		if err != nil || (r.Status == orders.HoldConfirmed) != (r.OrderID != "") || r.Status == orders.HoldHeld {
			t.Fatalf("hold %+v (%v)", r, err)
		}
	}
	wantAudit(t, s)
}

// wantAudit checks I1 on the counters and on a recount from the history.
func wantAudit(t *testing.T, s *gormstore.Store) {
	t.Helper()
	stocks, err := s.Stocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recounts, err := s.Recount(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a := orders.NewAudit(stocks, recounts); !a.Consistent || a.Oversold != 0 {
		t.Fatalf("audit %+v", a)
	}
}

// A deep audit taken while orders, holds and confirms commit sees one
// snapshot: the counters and their recount from the history always agree.
func TestAuditIsOneSnapshot(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			s, _ := newHoldStore(t, kind)
			// The writes are bounded: unbounded, the history a deep audit recounts
			// grew for as long as the audits took, and on a busy machine the
			// audits took longer for it, until the deadline.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			mustRestock(t, s, "A-1", 100_000, 1)
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := range 2000 {
					select {
					case <-done:
						return
					default:
					}
					id := fmt.Sprintf("%d", i)
					if _, err := place(s, order("o"+id, orders.Item{SKU: "A-1", Quantity: 1}), nil, ""); err != nil {
						t.Error(err)
						return
					}
					if _, err := hold(s, "h"+id, time.Hour, nil, "", orders.Item{SKU: "A-1", Quantity: 2}); err != nil {
						t.Error(err)
						return
					}
					if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h" + id, Order: order("c" + id)}, nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
			for range 40 {
				a, err := s.Audit(ctx, true, time.Minute)
				if err != nil || !a.Consistent {
					t.Errorf("audit during writes: %+v %v", a, err)
					break
				}
			}
			close(done)
			wg.Wait()
		})
	}
}

// End decides each ending on its own, in order, in one transaction: a refusal
// (a hold already ended, one not found, a bad confirm) writes nothing of its
// own and leaves the others; a later ending of a hold sees an earlier one's
// end; each SKU's counters change once by the sum; a stale fence fails them
// all and writes nothing.
func testEndMany(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 10, 1)
	mustRestock(t, s, "B-2", 10, 1)
	for id, its := range map[string][]orders.Item{
		"h1": {{SKU: "A-1", Quantity: 2}}, "h2": {{SKU: "A-1", Quantity: 1}, {SKU: "B-2", Quantity: 1}},
		"h3": {{SKU: "B-2", Quantity: 3}}, "late": {{SKU: "A-1", Quantity: 1}},
	} {
		ttl := 10 * time.Minute
		if id == "late" {
			ttl = time.Second
		}
		if _, err := hold(s, id, ttl, nil, "", its...); err != nil {
			t.Fatal(err)
		}
	}
	clk.Add(2 * time.Second) // late is past its expiry
	es := []orders.Ending{
		{Confirm: &orders.Confirmation{HoldID: "h1", Order: order("o1"), Key: "c1", Hash: "hc1"}},
		{Release: &orders.Release{HoldID: "h1"}},                                                                    // confirmed just before
		{Confirm: &orders.Confirmation{HoldID: "h3", Order: order("o3", orders.Item{SKU: "A-1", Quantity: 1})}},     // A-1 is not in h3
		{Release: &orders.Release{HoldID: "h2", Keyed: orders.Keyed{Key: "r2", Hash: "hr2"}}},                       // released
		{Confirm: &orders.Confirmation{HoldID: "late", Order: order("o4")}},                                         // past its expiry
		{Confirm: &orders.Confirmation{HoldID: "nope", Order: order("o5")}},                                         // no such hold
		{Confirm: &orders.Confirmation{HoldID: "h3", Order: order("o6", orders.Item{SKU: "B-2", Quantity: 2})}},     // 2 of 3
		{Expire: &orders.Expiry{HoldIDs: []string{"h3", "late"}, Leader: orders.Leader{Name: "sweeper", Token: 1}}}, // h3 confirmed just before
	}
	// A token the database has seen fails the whole and writes nothing.
	if _, _, err := s.End(ctx, es, orders.Fences{"A-1": 1, "B-2": 5}); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("a stale token: %v", err)
	}
	wantStatus(t, s, "h1", orders.HoldHeld)
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 6, Held: 4, Stocked: 10})

	out, after, err := s.End(ctx, es, orders.Fences{"A-1": 5, "B-2": 5})
	if err != nil {
		t.Fatal(err)
	}
	wantErr := []error{nil, orders.ErrHoldConfirmed, orders.ErrInvalid, nil, orders.ErrHoldExpired, orders.ErrNotFound, nil, nil}
	for i, want := range wantErr {
		if (want == nil) != (out[i].Err == nil) || (want != nil && !errors.Is(out[i].Err, want)) {
			t.Errorf("ending %d: %v; want %v", i, out[i].Err, want)
		}
	}
	if fmt.Sprint(out[0].Order.Items) != "[{A-1 2}]" || fmt.Sprint(out[6].Order.Items) != "[{B-2 2}]" || out[7].Expired != 1 {
		t.Errorf("confirmed %v and %v, expired %d", out[0].Order.Items, out[6].Order.Items, out[7].Expired)
	}
	if out[3].Reservation.Status != orders.HoldReleased {
		t.Errorf("released %+v", out[3].Reservation)
	}
	// h1's 2 sold, h2's 1 and late's 1 back. B-2: h2's 1 back, h3's 2 sold and 1 back.
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 8, Sold: 2, Stocked: 10})
	wantStock(t, s, orders.Stock{SKU: "B-2", Available: 8, Sold: 2, Stocked: 10})
	if after["A-1"] != 8 || after["B-2"] != 8 {
		t.Errorf("after %v", after)
	}
	for id, want := range map[string]orders.HoldStatus{"h1": orders.HoldConfirmed, "h2": orders.HoldReleased, "h3": orders.HoldConfirmed, "late": orders.HoldExpired} {
		wantStatus(t, s, id, want)
	}
	if recs, err := s.Outcomes(ctx, []string{"c1", "r2"}); err != nil || recs["c1"].Outcome.OrderID != "o1" || recs["r2"].Outcome.ReservationID != "h2" {
		t.Errorf("records %+v %v", recs, err)
	}
	wantAudit(t, s)
}

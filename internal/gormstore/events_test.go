package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// TestEvents makes every kind of change of a SKU's counters, and some that
// fail, and checks the outbox: one event per change and SKU, none for a write
// that failed, each SKU's numbered 1..n with no gap, each event's counters
// its predecessor's plus its change, and the last one's the SKU's row; then
// the relay's side: positions in commit order, publishing, the backlog, the
// purge and the relay's lease.
func TestEvents(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) { testEvents(t, kind) })
	}
}

var relay = orders.Leader{Name: "job:events", Token: 5}

func testEvents(t *testing.T, kind string) {
	s, clk := newHoldStore(t, kind)
	ctx := context.Background()
	sweeper := orders.Leader{Name: "job:sweeper", Token: 1}

	mustRestock(t, s, "A-1", 10, 1)                        // A1 restocked
	if _, err := s.Restock(ctx, "A-1", 5, 2); err != nil { // A2 restocked
		t.Fatal(err)
	}
	if _, _, err := s.SetStock(ctx, "B-2", orders.StockSet{Available: 7}, 1); err != nil { // B1 set (created)
		t.Fatal(err)
	}
	if _, err := place(s, order("o1", orders.Item{SKU: "A-1", Quantity: 2}, orders.Item{SKU: "B-2", Quantity: 1}), orders.Fences{"A-1": 3, "B-2": 2}, "k1"); err != nil {
		t.Fatal(err) // A3, B2 placed
	}
	// A batch: an order and a hold on A (A4 placed, A5 reservation created).
	if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{
		{Order: order("o2", orders.Item{SKU: "A-1", Quantity: 1})},
		{Order: order("h1", orders.Item{SKU: "A-1", Quantity: 3}), Hold: &orders.Hold{TTL: time.Hour}},
	}}, orders.Fences{"A-1": 4}); err != nil {
		t.Fatal(err)
	}
	// Writes that fail write no event: short stock, a stale token.
	if _, err := place(s, order("o3", orders.Item{SKU: "B-2", Quantity: 100}), nil, ""); !errors.Is(err, orders.ErrInsufficientStock) {
		t.Fatalf("short: %v", err)
	}
	if _, err := place(s, order("o4", orders.Item{SKU: "A-1", Quantity: 1}), orders.Fences{"A-1": 1}, ""); !errors.Is(err, orders.ErrStaleFence) {
		t.Fatalf("stale: %v", err)
	}
	if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o5", orders.Item{SKU: "A-1", Quantity: 2})}, nil); err != nil {
		t.Fatal(err) // A6 confirmed (2 sold, 1 back)
	}
	mustHold(t, s, "h2", time.Hour, orders.Item{SKU: "B-2", Quantity: 2}) // B3
	if _, _, err := s.Release(ctx, "h2", orders.Keyed{}, nil); err != nil {
		t.Fatal(err) // B4 released
	}
	mustHold(t, s, "h3", time.Second, orders.Item{SKU: "A-1", Quantity: 1}, orders.Item{SKU: "B-2", Quantity: 1}) // A7, B5
	clk.Add(2 * time.Second)
	if n, _, err := s.Expire(ctx, []string{"h3"}, nil, sweeper); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err) // A8, B6 expired
	}
	if _, _, err := s.Cancel(ctx, "o1", nil, clk.Now()); err != nil {
		t.Fatal(err) // A9, B7 cancelled
	}
	a, _ := s.Stock(ctx, "A-1")
	if _, _, err := s.SetStock(ctx, "A-1", orders.StockSet{Available: a.Available}, 9); err != nil {
		t.Fatal(err) // no change: no event
	}
	if _, _, err := s.SetStock(ctx, "B-2", orders.StockSet{Available: 20}, 9); err != nil {
		t.Fatal(err) // B8 set
	}

	// Nothing is in the feed before the relay moves its end.
	if evs, err := s.Events(ctx, 0, 100); err != nil || len(evs) != 0 {
		t.Fatalf("feed before its end moved: %v %v", evs, err)
	}
	end, err := s.Settle(ctx, relay)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := s.Events(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 17 || evs[16].Position != end {
		t.Fatalf("listed %d events, the last at %d, want 17 through the end %d", len(evs), evs[len(evs)-1].Position, end)
	}
	want := map[string][]orders.EventType{
		"A-1": {"stock.restocked", "stock.restocked", "order.placed", "order.placed", "reservation.created",
			"reservation.confirmed", "reservation.created", "reservation.expired", "order.cancelled"},
		"B-2": {"stock.set", "order.placed", "reservation.created", "reservation.released", "reservation.created",
			"reservation.expired", "order.cancelled", "stock.set"},
	}
	rebuilt := rebuild(t, evs)
	for sku, types := range want {
		var got []orders.EventType
		for _, e := range evs {
			if e.SKU == sku {
				got = append(got, e.Type)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(types) {
			t.Errorf("%s: events %v, want %v", sku, got, types)
		}
		st, err := s.Stock(ctx, sku)
		if err != nil {
			t.Fatal(err)
		}
		if w := (orders.Levels{Available: st.Available, Reserved: st.Held, Sold: st.Sold, Stocked: st.Stocked}); rebuilt[sku] != w {
			t.Errorf("%s: rebuilt from its events %+v, the row says %+v", sku, rebuilt[sku], w)
		}
	}
	for i, e := range evs {
		if e.ID != orders.EventID(e.Position) || (i > 0 && e.Position <= evs[i-1].Position) || e.CreatedAt.IsZero() {
			t.Errorf("event %d: id %s after %d, created %v", i, e.ID, evs[max(i-1, 0)].Position, e.CreatedAt)
		}
	}
	for _, e := range evs {
		if e.Type == orders.EventReservationConfirmed && (e.OrderID != "o5" || e.ReservationID != "h1" || e.Quantity != 3 ||
			e.Change != (orders.Levels{Available: 1, Reserved: -3, Sold: 2})) {
			t.Errorf("the confirm's event: %+v", e)
		}
	}
	if page, err := s.Events(ctx, evs[14].Position, 10); err != nil || len(page) != 2 || page[0].ID != evs[15].ID {
		t.Errorf("the feed after %s: %+v %v", evs[14].ID, page, err)
	}

	// Delivering, the backlog and the purge.
	if b, err := s.EventBacklog(ctx, 0); err != nil || b.Events != 17 || !b.Oldest.Equal(evs[0].CreatedAt) {
		t.Fatalf("backlog: %+v %v", b, err)
	}
	if through, err := s.Delivered(ctx, "nats"); err != nil || through != 0 {
		t.Fatalf("delivered through %d (%v) before any", through, err)
	}
	if err := s.MarkDelivered(ctx, "nats", 0, evs[4].Position, relay); err != nil {
		t.Fatal(err)
	}
	// A relay that read the cursor before it moved moves nothing.
	if err := s.MarkDelivered(ctx, "nats", 0, evs[2].Position, relay); !errors.Is(err, orders.ErrCursorMoved) {
		t.Fatalf("a move from where the cursor no longer is: %v", err)
	}
	if through, err := s.Delivered(ctx, "nats"); err != nil || through != evs[4].Position {
		t.Fatalf("delivered through %d (%v), want %d", through, err, evs[4].Position)
	}
	// An operator rewinds the cursor; the relay that read it before moves
	// nothing, and a rewind past it is refused.
	if was, err := s.RewindDelivered(ctx, "nats", evs[1].Position); err != nil || was != evs[4].Position {
		t.Fatalf("rewound from %d (%v), want %d", was, err, evs[4].Position)
	}
	if err := s.MarkDelivered(ctx, "nats", evs[4].Position, evs[6].Position, relay); !errors.Is(err, orders.ErrCursorMoved) {
		t.Fatalf("a move from before the rewind: %v", err)
	}
	if _, err := s.RewindDelivered(ctx, "nats", evs[6].Position); !errors.Is(err, orders.ErrInvalid) {
		t.Fatalf("a rewind past the cursor: %v", err)
	}
	if err := s.MarkDelivered(ctx, "nats", evs[1].Position, evs[4].Position, relay); err != nil {
		t.Fatal(err)
	}
	if b, err := s.EventBacklog(ctx, evs[4].Position); err != nil || b.Events != 12 || !b.Oldest.Equal(evs[5].CreatedAt) {
		t.Fatalf("backlog after the fifth: %+v %v", b, err)
	}
	future := clk.Now().Add(time.Hour) // the store's clock: WithClock's
	if n, err := s.PurgeEvents(ctx, future, evs[2].Position, 100, relay); err != nil || n != 3 {
		t.Fatalf("purged %d (%v), want the 3 through the third", n, err)
	}
	if p, err := s.Delivered(ctx, orders.CursorPurged); err != nil || p != evs[2].Position {
		t.Fatalf("the purge's cursor %d %v, want %d", p, err, evs[2].Position)
	}
	if n, err := s.PurgeEvents(ctx, evs[0].CreatedAt, 1<<62, 100, relay); err != nil || n != 0 {
		t.Fatalf("purged %d (%v) of events written at or after the cutoff", n, err)
	}
	if page, err := s.Events(ctx, 0, 2); err != nil || len(page) != 2 || page[0].ID != evs[3].ID {
		t.Fatalf("the feed after the purge: %+v %v", page, err)
	}

	// A former relay writes nothing.
	stale := orders.Leader{Name: relay.Name, Token: relay.Token - 1}
	if _, err := s.Restock(ctx, "B-2", 1, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, stale); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale relay moved the feed's end: %v", err)
	}
	if err := s.MarkDelivered(ctx, "nats", evs[4].Position, evs[5].Position, stale); !errors.Is(err, orders.ErrStaleLeader) {
		t.Fatalf("a stale relay moved a cursor: %v", err)
	}
	// An event past the feed's end is in the backlog, and not in the feed.
	if b, err := s.EventBacklog(ctx, end); err != nil || b.Events != 1 {
		t.Fatalf("backlog of one event past the end: %+v %v", b, err)
	}
	if page, err := s.Events(ctx, end, 10); err != nil || len(page) != 0 {
		t.Fatalf("the feed past its end: %+v %v", page, err)
	}
}

// rebuild applies every SKU's changes in order from zero, checking that each
// SKU's events are numbered 1, 2, 3... and each one's counters are its
// predecessor's plus its change.
func rebuild(t *testing.T, evs []orders.Event) map[string]orders.Levels {
	t.Helper()
	out, err := rebuilt(evs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rebuilt(evs []orders.Event) (map[string]orders.Levels, error) {
	out := map[string]orders.Levels{}
	seq := map[string]int64{}
	for _, e := range evs {
		if e.Seq != seq[e.SKU]+1 {
			return nil, fmt.Errorf("%s: event %s numbered %d after %d", e.SKU, e.ID, e.Seq, seq[e.SKU])
		}
		seq[e.SKU] = e.Seq
		out[e.SKU] = out[e.SKU].Add(e.Change)
		if out[e.SKU] != e.Counters {
			return nil, fmt.Errorf("%s: event %s says counters %+v, its changes add up to %+v", e.SKU, e.ID, e.Counters, out[e.SKU])
		}
	}
	return out, nil
}

// TestEventsOnlyOfWhatCommitted fails writes after they wrote their events (a
// key recorded meanwhile fails a batch at its last statement) and checks that
// the counters rebuilt from the events are the rows': and that this check
// catches a store that writes its events outside the transaction.
func TestEventsOnlyOfWhatCommitted(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			s, _ := newStore(t, kind)
			if err := eventsMatchRows(t, s); err != nil {
				t.Fatal(err)
			}
		})
		if kind == "sqlite" {
			continue // one connection: a write outside the transaction would wait for it
		}
		t.Run(kind+"/outside the transaction", func(t *testing.T) {
			s, _ := newStore(t, kind)
			err := eventsMatchRows(t, s.WithEventsOutsideTransaction())
			if err == nil {
				t.Fatal("events written outside the transaction, and the rebuild from them matched the rows")
			}
			t.Logf("caught, as it must be: %v", err)
		})
	}
}

// eventsMatchRows makes writes, some failing after their events, and says
// whether the counters rebuilt from the events differ from the rows.
func eventsMatchRows(t *testing.T, s *gormstore.Store) error {
	ctx := context.Background()
	mustRestock(t, s, "A-1", 10, 1)
	if _, err := place(s, order("o1", orders.Item{SKU: "A-1", Quantity: 1}), nil, "k1"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // each fails at its key's record, after its events
		_, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{
			{Order: order(fmt.Sprintf("o%d", i+2), orders.Item{SKU: "A-1", Quantity: 2}), Key: "k1", Hash: "h-k1"},
		}}, nil)
		if !errors.Is(err, orders.ErrIdempotencyConflict) {
			t.Fatalf("a key recorded meanwhile: %v", err)
		}
	}
	if _, err := s.Settle(ctx, relay); err != nil {
		return err
	}
	evs, err := s.Events(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rebuilt(evs)
	if err != nil {
		return err
	}
	st, err := s.Stock(ctx, "A-1")
	if err != nil {
		t.Fatal(err)
	}
	if w := (orders.Levels{Available: st.Available, Reserved: st.Held, Sold: st.Sold, Stocked: st.Stocked}); got["A-1"] != w {
		return fmt.Errorf("A-1 rebuilt from %d events: %+v; its row: %+v", len(evs), got["A-1"], w)
	}
	return nil
}

var _ orders.EventStore = (*gormstore.Store)(nil)

// TestWithoutEvents: a store with events off writes none, and its SKUs still
// count their changes, so that events turned on again show the gap.
func TestWithoutEvents(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			on, _ := newStore(t, kind)
			off := on.WithoutEvents()
			ctx := context.Background()
			mustRestock(t, off, "A-1", 10, 1)
			if _, err := place(off, order("o1", orders.Item{SKU: "A-1", Quantity: 1}), nil, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := place(on, order("o2", orders.Item{SKU: "A-1", Quantity: 1}), nil, ""); err != nil {
				t.Fatal(err)
			}
			if _, err := on.Settle(ctx, relay); err != nil {
				t.Fatal(err)
			}
			evs, err := on.Events(ctx, 0, 10)
			if err != nil || len(evs) != 1 || evs[0].Seq != 3 || evs[0].OrderID != "o2" {
				t.Fatalf("events: %+v %v; want o2's alone, numbered 3", evs, err)
			}
		})
	}
}

// A batch's events cost no round trip of their own on PostgreSQL: they ride
// in the statement of the batch's ledger INSERT (a WITH query), so a batch
// sends as many statements with events as without. MySQL and SQLite take no
// INSERT in a WITH query: there the events are one statement more. Batches of
// orders, of a hold alone, of orders beside a refusal, and a release (End's
// batch of endings) are each counted.
func TestBatchEventsRideInItsStatements(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			db := openDB(t, kind)
			ctx := context.Background()
			if _, err := gormstore.Migrate(ctx, db); err != nil {
				t.Fatal(err)
			}
			var sent atomic.Int64
			if err := gormstore.CountStatements(db, &sent); err != nil {
				t.Fatal(err)
			}
			s := gormstore.New(db, time.Now, 10*time.Second)
			// The store without events writes to SKUs of its own: its changes
			// have no events, and would break the chain of A-1's and B-2's.
			for _, sku := range []string{"A-1", "B-2", "off-A-1", "off-B-2"} {
				mustRestock(t, s, sku, 100, 1)
			}
			batches := map[string]func(p string) orders.Batch{
				"orders": func(p string) orders.Batch {
					return orders.Batch{Placed: []orders.Placement{
						{Order: order(p+"o1", orders.Item{SKU: p + "A-1", Quantity: 1}), Key: p + "k1", Hash: "h"},
						{Order: order(p+"o2", orders.Item{SKU: p + "A-1", Quantity: 2}, orders.Item{SKU: p + "B-2", Quantity: 1}), Key: p + "k2", Hash: "h"},
					}}
				},
				"a hold": func(p string) orders.Batch {
					return orders.Batch{Placed: []orders.Placement{
						{Order: order(p+"h1", orders.Item{SKU: p + "B-2", Quantity: 1}), Hold: &orders.Hold{TTL: time.Hour}},
					}}
				},
				"orders and a refusal": func(p string) orders.Batch {
					return orders.Batch{
						Placed:  []orders.Placement{{Order: order(p+"o3", orders.Item{SKU: p + "A-1", Quantity: 1})}},
						Refused: []orders.Placement{{Key: p + "k3", Hash: "h", Short: []string{p + "B-2"}}},
					}
				},
			}
			for name, batch := range batches {
				count := func(s *gormstore.Store, prefix string) int64 {
					sent.Store(0)
					if _, err := s.Commit(ctx, batch(prefix), nil); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					return sent.Load()
				}
				off, on := count(s.WithoutEvents(), "off-"), count(s, "")
				want := off
				if kind != testenv.Postgres {
					want = off + 1
				}
				if on != want {
					t.Errorf("%s: %d statements with events, %d without; want %d", name, on, off, want)
				}
			}
			// So do the events of a batch of endings (Store.End), here a release.
			release := func(s *gormstore.Store, prefix string) int64 {
				sent.Store(0)
				if _, _, err := s.Release(ctx, prefix+"h1", orders.Keyed{}, nil); err != nil {
					t.Fatalf("release: %v", err)
				}
				return sent.Load()
			}
			off, on := release(s.WithoutEvents(), "off-"), release(s, "")
			if want := off + map[bool]int64{true: 0, false: 1}[kind == testenv.Postgres]; on != want {
				t.Errorf("a release: %d statements with events, %d without; want %d", on, off, want)
			}
			// The events were written, numbered, with the counters after each.
			if _, err := s.Settle(ctx, relay); err != nil {
				t.Fatal(err)
			}
			evs, err := s.Events(ctx, 0, 100)
			if err != nil {
				t.Fatal(err)
			}
			last := map[string]orders.Event{}
			for _, e := range evs {
				if p, ok := last[e.SKU]; ok && (e.Seq != p.Seq+1 || e.Counters.Available != p.Counters.Available+e.Change.Available) {
					t.Errorf("%s's event %d after %d: %+v after %+v", e.SKU, e.Seq, p.Seq, e.Counters, p.Counters)
				}
				if strings.HasPrefix(e.SKU, "off-") && e.Seq > 1 {
					t.Errorf("the store without events wrote %+v", e)
				}
				last[e.SKU] = e
			}
			for sku, want := range map[string]int64{"A-1": 100 - 1 - 2 - 1, "B-2": 100 - 1 - 1 + 1} {
				if got := last[sku].Counters.Available; got != want {
					t.Errorf("%s: the last event says %d available, want %d", sku, got, want)
				}
			}
		})
	}
}

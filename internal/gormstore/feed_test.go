package gormstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/testenv"
)

// insertEvent is an event's INSERT as a write makes it, for a transaction the
// test holds open: it takes its id from the sequence now and commits when the
// test says.
const insertEvent = `INSERT INTO stock_events (sku, seq, type, quantity, d_available, d_reserved, d_sold, d_stocked,
  available, reserved, sold, stocked, created_at) VALUES (?, 1, 'stock.restocked', 1, 1, 0, 0, 1, 1, 0, 0, 1, ?)`

// TestFeedNeverSkipsALateCommit holds a write of an event open across the
// relay's rounds while others commit after it (with larger ids), and reads
// the feed as a consumer does, from its cursor, round after round: the late
// event must reach the reader after its commit. The same run on a store whose
// feed ends at the largest id committed (the reader that trusts the sequence)
// must lose it, or the test could not tell the two apart. SQLite has no such
// run: it writes one transaction at a time, so an id taken is committed or
// rolled back before a larger one is taken (TestFeedOnSQLiteSettlesAtOnce).
func TestFeedNeverSkipsALateCommit(t *testing.T) {
	for _, kind := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(kind, func(t *testing.T) {
			s, _ := newStore(t, kind)
			if missed := lateCommit(t, s.WithSettleAfter(time.Millisecond)); len(missed) > 0 {
				t.Fatalf("the reader never had %v", missed)
			}
		})
		t.Run(kind+"/trusting the sequence", func(t *testing.T) {
			s, _ := newStore(t, kind)
			missed := lateCommit(t, s.TrustingTheSequence())
			if len(missed) == 0 {
				t.Fatal("a feed that trusts the sequence gave the late event too: the test cannot tell")
			}
			t.Logf("skipped, as it must be: %v", missed)
		})
	}
}

// lateCommit runs the late write against s and returns the SKUs whose events
// the reader never had.
func lateCommit(t *testing.T, s *gormstore.Store) []string {
	ctx := context.Background()
	mustRestock(t, s, "A-1", 1, 1) // committed before
	late := s.DB().Begin()
	t.Cleanup(func() { late.Rollback() })
	if err := late.Exec(insertEvent, "L-1", time.Now().UTC()).Error; err != nil {
		t.Fatal(err)
	}
	mustRestock(t, s, "B-2", 1, 1) // committed after, with a larger id
	had := map[string]bool{}
	var cursor int64
	read := func() {
		if _, err := s.AdvanceFeed(ctx, relay); err != nil {
			t.Fatal(err)
		}
		for {
			evs, err := s.Events(ctx, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				return
			}
			for _, e := range evs {
				had[e.SKU] = true
			}
			cursor = evs[len(evs)-1].Position
		}
	}
	for i := range 3 { // the relay's rounds while the write is open
		read()
		mustRestock(t, s, fmt.Sprintf("C-%d", i), 1, 1)
	}
	if err := late.Commit().Error; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, relay); err != nil {
		t.Fatal(err)
	}
	read()
	var missed []string
	for _, sku := range []string{"A-1", "L-1", "B-2", "C-0", "C-1", "C-2"} {
		if !had[sku] {
			missed = append(missed, sku)
		}
	}
	return missed
}

// TestFeedWaitsForAnOpenWrite: while a write of an event is open, the feed
// ends before its id, and says it waits; after its rollback the end moves past
// it, the id never used.
func TestFeedWaitsForAnOpenWrite(t *testing.T) {
	for _, kind := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(kind, func(t *testing.T) {
			s, _ := newStore(t, kind)
			s = s.WithSettleAfter(time.Millisecond)
			ctx := context.Background()
			mustRestock(t, s, "A-1", 1, 1)
			before, err := s.Settle(ctx, relay)
			if err != nil {
				t.Fatal(err)
			}
			open := s.DB().Begin()
			t.Cleanup(func() { open.Rollback() })
			if err := open.Exec(insertEvent, "L-1", time.Now().UTC()).Error; err != nil {
				t.Fatal(err)
			}
			mustRestock(t, s, "B-2", 1, 1)
			for range 3 {
				end, err := s.AdvanceFeed(ctx, relay)
				if err != nil {
					t.Fatal(err)
				}
				if end.Through != before || !end.Waiting {
					t.Fatalf("the feed ends at %d (waiting %v) with a write open; want %d, waiting", end.Through, end.Waiting, before)
				}
			}
			if err := open.Rollback().Error; err != nil {
				t.Fatal(err)
			}
			end, err := s.Settle(ctx, relay)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := s.Events(ctx, before, 10)
			if err != nil || len(evs) != 1 || evs[0].SKU != "B-2" || evs[0].Position != end {
				t.Fatalf("after the rollback: the feed to %d lists %+v %v; want B-2's event alone", end, evs, err)
			}
		})
	}
}

// TestFeedOnSQLiteSettlesAtOnce: SQLite writes one transaction at a time, so
// the feed ends at the largest id committed, at once.
func TestFeedOnSQLiteSettlesAtOnce(t *testing.T) {
	s, _ := newStore(t, testenv.SQLite)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 1, 1)
	mustRestock(t, s, "B-2", 1, 1)
	end, err := s.AdvanceFeed(ctx, relay)
	if err != nil || end.Waiting {
		t.Fatalf("the feed's end %+v %v, want settled at once", end, err)
	}
	if evs, err := s.Events(ctx, 0, 10); err != nil || len(evs) != 2 || evs[1].Position != end.Through {
		t.Fatalf("the feed %+v %v, want both events through %d", evs, err, end.Through)
	}
}

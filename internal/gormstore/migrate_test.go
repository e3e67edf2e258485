package gormstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// A database of schema 1, with sales, a cancel and a claim left running by a
// crashed replica, migrates to counters that match its history, no running
// claim, and keys that can be used again.
func TestMigrationToCountersKeepsTheHistory(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			db := openDB(t, kind)
			ctx := context.Background()
			if _, err := gormstore.MigrateTo(ctx, db, 1); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			for _, q := range []string{
				`INSERT INTO skus (sku, available, fence, updated_at) VALUES ('A-1', 6, 3, ?), ('B-2', 0, 1, ?)`,
				`INSERT INTO stock_ledger (sku, delta, kind, fence, created_at) VALUES ('A-1', 10, 'restock', 1, ?), ('B-2', 2, 'restock', 1, ?)`,
				`INSERT INTO orders (id, status, idempotency_key, created_at) VALUES ('o1', 'placed', 'k1', ?), ('o2', 'cancelled', NULL, ?)`,
				`INSERT INTO order_lines (order_id, sku, quantity) VALUES ('o1', 'A-1', 4), ('o2', 'A-1', 1), ('o1', 'B-2', 2)`,
				`INSERT INTO idempotency_records (idem_key, request_hash, state, claim, order_id, created_at, updated_at)
				 VALUES ('k1', 'h1', 'done', 'o1', 'o1', ?, ?), ('k2', 'h2', 'running', 'x', NULL, ?, ?)`,
			} {
				args := make([]any, strings.Count(q, "?"))
				for i := range args {
					args[i] = now
				}
				if err := db.Exec(q, args...).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if n, err := gormstore.Migrate(ctx, db); err != nil || n != gormstore.MigrationsAfter(1) {
				t.Fatalf("migrate: %d applied, %v", n, err)
			}
			s := gormstore.New(db, time.Now, 10*time.Second)
			wantStock(t, s, orders.Stock{SKU: "A-1", Available: 6, Sold: 4, Stocked: 10})
			wantStock(t, s, orders.Stock{SKU: "B-2", Available: 0, Sold: 2, Stocked: 2})
			if a := mustAudit(t, s); !a.Consistent {
				t.Fatalf("audit after the migration: %+v", a)
			}
			recs, err := s.Outcomes(ctx, []string{"k1", "k2"})
			if err != nil || len(recs) != 1 || recs["k1"].Outcome.OrderID != "o1" {
				t.Fatalf("records %+v %v: want k1 kept and the running k2 gone", recs, err)
			}
			// k2 is free, and an order's key is no longer unique on orders.
			p := orders.Placement{Order: order("o3", orders.Item{SKU: "A-1", Quantity: 1}), Key: "k2", Hash: "h2"}
			if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{p}}, orders.Fences{"A-1": 4}); err != nil {
				t.Fatal(err)
			}
			wantStock(t, s, orders.Stock{SKU: "A-1", Available: 5, Sold: 5, Stocked: 10})
			// Holds work on the history's SKUs, reserved counted from 0.
			h := orders.Placement{Order: order("h1", orders.Item{SKU: "A-1", Quantity: 2}), Hold: &orders.Hold{TTL: time.Minute}}
			if _, err := s.Commit(ctx, orders.Batch{Placed: []orders.Placement{h}}, orders.Fences{"A-1": 5}); err != nil {
				t.Fatal(err)
			}
			wantStock(t, s, orders.Stock{SKU: "A-1", Available: 3, Held: 2, Sold: 5, Stocked: 10})
			if a := mustAudit(t, s); !a.Consistent {
				t.Fatalf("audit after a hold: %+v", a)
			}
			if n, err := gormstore.Migrate(ctx, db); err != nil || n != 0 {
				t.Fatalf("second migrate: %d applied, %v", n, err)
			}
		})
	}
}

// A database of schema 5 has the unique index on the events' (sku, seq) that
// migration 4 made; migration 6 drops it, and events written after number on.
func TestMigrationDropsTheEventsSeqIndex(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			db := openDB(t, kind)
			ctx := context.Background()
			if _, err := gormstore.MigrateTo(ctx, db, 5); err != nil {
				t.Fatal(err)
			}
			// Migration 4 made the table from the model, which no longer
			// names the index: schema 5 as it was is made here.
			if err := db.Exec("CREATE UNIQUE INDEX idx_stock_events_sku_seq ON stock_events (sku, seq)").Error; err != nil {
				t.Fatal(err)
			}
			if !db.Migrator().HasIndex("stock_events", "idx_stock_events_sku_seq") {
				t.Fatal("schema 5: no index idx_stock_events_sku_seq to drop")
			}
			if n, err := gormstore.Migrate(ctx, db); err != nil || n != gormstore.MigrationsAfter(5) {
				t.Fatalf("migrate: %d applied, %v; want migration 6 and those after", n, err)
			}
			if db.Migrator().HasIndex("stock_events", "idx_stock_events_sku_seq") {
				t.Fatal("after migration 6: the index idx_stock_events_sku_seq is still there")
			}
			s := gormstore.New(db, time.Now, 10*time.Second)
			if _, _, err := s.SetStock(ctx, "A-1", orders.StockSet{Available: 5}, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Settle(ctx, orders.Leader{}); err != nil {
				t.Fatal(err)
			}
			if evs, err := s.Events(ctx, 0, 10); err != nil || len(evs) != 1 || evs[0].Seq != 1 {
				t.Fatalf("events after the migration: %+v %v; want the restock, seq 1", evs, err)
			}
		})
	}
}

// A database of schema 9 has events the relay placed, in commit order (a late
// commit placed after larger ids), and events it had not placed yet, with
// cursors on the positions. Migration 10 places those, makes every id its
// position, and new events number on past them: every cursor keeps its
// meaning, and no event is skipped or listed twice.
func TestMigrationMakesTheIdThePosition(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			db := openDB(t, kind)
			ctx := context.Background()
			if _, err := gormstore.MigrateTo(ctx, db, 9); err != nil {
				t.Fatal(err)
			}
			// Six events, quantity 1..6 in id order; placed: 1→1, 2→2, 4→3,
			// 5→4, 3→5 (committed late); 6 not yet.
			for q := 1; q <= 6; q++ {
				if err := db.Exec(`INSERT INTO stock_events (sku, seq, type, quantity, d_available, d_reserved, d_sold, d_stocked,
  available, reserved, sold, stocked, created_at) VALUES ('A-1', ?, 'stock.restocked', ?, 1, 0, 0, 1, 1, 0, 0, 1, ?)`,
					q, q, time.Now().UTC()).Error; err != nil {
					t.Fatal(err)
				}
			}
			for q, p := range map[int]int{1: 1, 2: 2, 4: 3, 5: 4, 3: 5} {
				if err := db.Exec("UPDATE stock_events SET position = ? WHERE quantity = ?", p, q).Error; err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Exec("INSERT INTO event_cursors (name, through) VALUES ('nats', 3)").Error; err != nil {
				t.Fatal(err)
			}
			if n, err := gormstore.Migrate(ctx, db); err != nil || n != gormstore.MigrationsAfter(9) {
				t.Fatalf("migrate: %d applied, %v", n, err)
			}
			if db.Migrator().HasColumn("stock_events", "position") {
				t.Fatal("after migration 10: stock_events still has position")
			}
			s := gormstore.New(db, time.Now, 10*time.Second).WithSettleAfter(time.Millisecond)
			if _, _, err := s.SetStock(ctx, "B-2", orders.StockSet{Available: 5}, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Settle(ctx, orders.Leader{}); err != nil {
				t.Fatal(err)
			}
			through, err := s.Delivered(ctx, orders.DestinationNATS)
			if err != nil || through != 3 {
				t.Fatalf("the stream's cursor %d %v, want 3", through, err)
			}
			evs, err := s.Events(ctx, through, 10)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, fmt.Sprintf("%s:%d@%d", e.SKU, e.Quantity, e.Position))
			}
			// After the cursor: what was placed at 4 and 5, then the unplaced
			// one at 6, then the new event past them all.
			if len(got) != 4 || got[0] != "A-1:5@4" || got[1] != "A-1:3@5" || got[2] != "A-1:6@6" ||
				evs[3].SKU != "B-2" || evs[3].Position <= 6 {
				t.Fatalf("the feed after the stream's cursor: %v; want A-1:5@4 A-1:3@5 A-1:6@6 and B-2's past 6", got)
			}
		})
	}
}

// A database of schema 10, with stock, an order, a hold and events, migrates
// to locations with its stock in the default location, unmoved: the SKU's own
// row is that location's counts until another location stocks it; then the
// old order and hold end in the default location.
func TestMigrationPutsTheStockInTheDefaultLocation(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			db := openDB(t, kind)
			ctx := context.Background()
			if _, err := gormstore.MigrateTo(ctx, db, 10); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			// 10 stocked: 3 sold to o1, 2 held by h1, 5 available.
			for _, q := range []string{
				`INSERT INTO skus (sku, available, stocked, sold, reserved, fence, event_seq, updated_at) VALUES ('A-1', 5, 10, 3, 2, 4, 3, ?)`,
				`INSERT INTO orders (id, status, created_at) VALUES ('o1', 'placed', ?)`,
				`INSERT INTO order_lines (order_id, sku, quantity) VALUES ('o1', 'A-1', 3)`,
				`INSERT INTO reservations (id, status, created_at, expires_at) VALUES ('h1', 'held', ?, ?)`,
				`INSERT INTO reservation_lines (reservation_id, sku, quantity) VALUES ('h1', 'A-1', 2)`,
				`INSERT INTO stock_ledger (sku, delta, kind, fence, created_at) VALUES ('A-1', 10, 'restock', 1, ?), ('A-1', -3, 'sale', 2, ?), ('A-1', -2, 'hold', 3, ?)`,
				`INSERT INTO stock_events (sku, seq, type, quantity, d_available, d_reserved, d_sold, d_stocked, available, reserved, sold, stocked, created_at)
				 VALUES ('A-1', 1, 'stock.restocked', 10, 10, 0, 0, 10, 10, 0, 0, 10, ?), ('A-1', 2, 'order.placed', 3, -3, 0, 3, 0, 7, 0, 3, 10, ?),
				        ('A-1', 3, 'reservation.created', 2, -2, 2, 0, 0, 5, 2, 3, 10, ?)`,
			} {
				args := make([]any, strings.Count(q, "?"))
				for i := range args {
					args[i] = now
				}
				if strings.Contains(q, "reservations") {
					args[1] = now.Add(time.Hour)
				}
				if err := db.Exec(q, args...).Error; err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if n, err := gormstore.Migrate(ctx, db); err != nil || n != gormstore.MigrationsAfter(10) {
				t.Fatalf("migrate: %d applied, %v", n, err)
			}
			s := gormstore.New(db, time.Now, 10*time.Second).WithSettleAfter(time.Millisecond)
			wantStock(t, s, orders.Stock{SKU: "A-1", Available: 5, Held: 2, Sold: 3, Stocked: 10})
			wantLocations(t, s, "A-1", "") // no rows: all in the default location
			if _, err := s.Settle(ctx, orders.Leader{}); err != nil {
				t.Fatal(err)
			}
			evs, err := s.Events(ctx, 0, 10)
			if err != nil || len(evs) != 3 || evs[2].Type != orders.EventReservationCreated {
				t.Fatalf("events after the migration: %+v %v", evs, err)
			}
			consistent(t, s)
			// Another location stocks it: the default location's row is the SKU's counts.
			addLocation(t, s, "berlin", 1, true)
			if _, _, err := s.SetLocationStock(ctx, "A-1", "berlin", orders.StockSet{Available: 4}, 5); err != nil {
				t.Fatal(err)
			}
			wantLocations(t, s, "A-1", "berlin:4/0/0 default:5/2/3 ")
			// The old hold confirms, and the old order cancels, in the default location.
			if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o2", orders.Item{SKU: "A-1", Quantity: 1})}, orders.Fences{"A-1": 6}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Cancel(ctx, "o1", orders.Fences{"A-1": 7}, now); err != nil {
				t.Fatal(err)
			}
			wantLocations(t, s, "A-1", "berlin:4/0/0 default:9/0/1 ")
			wantStock(t, s, orders.Stock{SKU: "A-1", Available: 13, Sold: 1, Stocked: 14})
			consistent(t, s)
		})
	}
}

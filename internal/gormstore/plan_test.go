package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// The tables the order path reads, and how many rows the big ones get.
var planTables = []string{"skus", "orders", "order_lines", "stock_ledger", "idempotency_records", "reservations", "reservation_lines"}

const (
	fillOrders = 100_000
	fillBatch  = 500 // placements per Commit while filling
	fillSKUs   = 100 // the filler's orders spread over these SKUs
)

// TestOrderPathIndexLookups: every read of the order path is an index lookup on
// PostgreSQL as the order path really runs it: on the production connection
// settings, on a session whose statements were prepared and run while the tables
// were tiny (as a replica's are after it starts on a fresh database), against
// tables grown to 100,000 rows since and never analysed (no statistics at all).
//
// Autovacuum analyses a fresh database's tables only when it next visits the
// database (every minute by default): meanwhile a statement the driver prepared
// and ran five times may have switched to a generic plan made for a tiny table, a
// sequential scan, and PostgreSQL keeps it until something invalidates it
// (ANALYZE, or VACUUM updating the table's size).
//
// The check reads what ran: the pool has one connection, so every statement runs
// on one session, and the tables' seq_scan counters (pg_stat_user_tables, this
// test's private schema only) are flushed and compared around each operation.
// When it fails, it shows the session's prepared statements whose generic plan
// scans, with that plan.
func TestOrderPathIndexLookups(t *testing.T) {
	url := gormstore.BoundIdleTransactions(testenv.NewDatabase(t, testenv.Postgres), 10*time.Second) // as cmd/stockguard opens it
	db, err := gormstore.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	sqlDB.SetMaxOpenConns(1) // one session: the one whose statement cache and counters are read
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := gormstore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	// No autovacuum on these tables: its ANALYZE (or its VACUUM, which updates the
	// table's size in pg_class) would invalidate the cached plans at a moment of
	// its choosing, and the test would pass or fail by the clock. Set before the
	// first statement is prepared: ALTER TABLE invalidates cached plans too.
	for _, table := range planTables {
		if err := db.WithContext(ctx).Exec(`ALTER TABLE "` + table + `" SET (autovacuum_enabled = off)`).Error; err != nil {
			t.Fatal(err)
		}
	}
	stmts := captureStatements(db)
	clk := testenv.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	store := gormstore.New(db, clk.Now, time.Minute).WithClock(clk.Now) // expiry on clk: the path's holds expire when it says
	p := &orderPath{store: store, clk: clk}
	if _, err := store.Restock(ctx, hotSKU, 1_000_000, p.nextFence()); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	for range 8 { // past the fifth execution of each statement, when PostgreSQL may choose a generic plan
		for _, op := range p.ops() {
			if err := op.run(ctx); err != nil {
				t.Fatalf("warming up, %s: %v", op.name, err)
			}
		}
	}
	warmed := time.Since(start)

	start = time.Now()
	fill(ctx, t, store, p)
	filled := time.Since(start)
	neverAnalysed(ctx, t, db)
	sizes := tableSizes(ctx, t, db)
	t.Logf("warm-up %s; filled in %s to %v", warmed.Round(time.Millisecond), filled.Round(time.Millisecond), sizes)

	var failures []string
	before := seqScans(ctx, t, db)
	for _, op := range p.ops() {
		if err := op.run(ctx); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		after := seqScans(ctx, t, db)
		for _, table := range planTables {
			if n := after[table].scans - before[table].scans; n > 0 {
				failures = append(failures, fmt.Sprintf("%s: %d sequential scan(s) of %s reading %d rows",
					op.name, n, table, after[table].rows-before[table].rows))
			}
		}
		before = after
	}
	neverAnalysed(ctx, t, db)
	if len(failures) > 0 {
		t.Errorf("the order path ran sequential scans on tables of %v rows, never analysed:\n  %s\n%s",
			sizes, strings.Join(failures, "\n  "), genericPlans(ctx, t, db, stmts))
	}
}

// Open turns PostgreSQL's sequential scans off, unless the URL says otherwise.
func TestSeqScanOffUnlessTheURLSays(t *testing.T) {
	base := testenv.NewDatabase(t, testenv.Postgres) // has a query already: search_path
	for _, c := range []struct{ url, want string }{
		{base, "off"},
		{gormstore.BoundIdleTransactions(base, time.Second), "off"},
		{base + "&enable_seqscan=on", "on"}, // the URL's own wins
	} {
		db, err := gormstore.Open(c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = db.Raw("SHOW enable_seqscan").Scan(&got).Error
		if sqlDB, _ := db.DB(); sqlDB != nil {
			_ = sqlDB.Close()
		}
		if err != nil || got != c.want {
			t.Errorf("%s: enable_seqscan %q (%v), want %q", c.url, got, err, c.want)
		}
	}
}

const hotSKU = "HOT-1"

// orderPath runs the order path on the hot SKU, as lock-batch does: the batch's
// idempotency keys read, the stock read, the batch committed (placed and
// refused, fenced), an order read and cancelled, the stock's numbers read, a
// restock; then holds made, read, extended, confirmed, released, found due and
// expired by the sweeper, and I6's count; then old records forgotten by key and
// purged by age, as the sweeper does.
type orderPath struct {
	store *gormstore.Store
	clk   *testenv.Clock
	fence int64
	round int
	last  []string // the previous batch's keys and order ids
}

func (p *orderPath) nextFence() int64 { p.fence++; return p.fence }

type pathOp struct {
	name string
	run  func(ctx context.Context) error
}

func (p *orderPath) ops() []pathOp {
	var batch, holds orders.Batch
	var due []orders.Reservation
	var keys []string
	var err error
	return []pathOp{
		{"prepare a batch", func(context.Context) error {
			p.round++
			batch = orders.Batch{}
			keys = keys[:0]
			for i := range 40 {
				id := fmt.Sprintf("o-%d-%d", p.round, i)
				pl := orders.Placement{Order: order(id, orders.Item{SKU: hotSKU, Quantity: 1}), Key: "k-" + id, Hash: "h"}
				if i < 32 {
					batch.Placed = append(batch.Placed, pl)
				} else {
					pl.Short = []string{hotSKU}
					batch.Refused = append(batch.Refused, pl)
				}
				keys = append(keys, pl.Key)
			}
			return nil
		}},
		{"Outcomes(1 key)", func(ctx context.Context) error { _, err := p.store.Outcomes(ctx, keys[:1]); return err }},
		{"Outcomes(8 keys)", func(ctx context.Context) error { _, err := p.store.Outcomes(ctx, keys[:8]); return err }},
		{"Outcomes(40 keys, some recorded)", func(ctx context.Context) error {
			mixed := append(slices.Clone(p.last[:min(20, len(p.last))]), keys...)[:40]
			_, err := p.store.Outcomes(ctx, mixed)
			return err
		}},
		{"Available", func(ctx context.Context) error { _, err := p.store.Available(ctx, []string{hotSKU}); return err }},
		{"Commit(32 placed + 8 refused, fenced)", func(ctx context.Context) error {
			_, err := p.store.Commit(ctx, batch, orders.Fences{hotSKU: p.nextFence()})
			p.last = slices.Clone(keys)
			return err
		}},
		{"Commit(1 placed, fenced)", func(ctx context.Context) error {
			id := fmt.Sprintf("o-%d-single", p.round)
			one := orders.Batch{Placed: []orders.Placement{{Order: order(id, orders.Item{SKU: hotSKU, Quantity: 1}), Key: "k-" + id, Hash: "h"}}}
			_, err := p.store.Commit(ctx, one, orders.Fences{hotSKU: p.nextFence()})
			return err
		}},
		{"Commit refused by a stale fence", func(ctx context.Context) error {
			id := fmt.Sprintf("o-%d-stale", p.round)
			one := orders.Batch{Placed: []orders.Placement{{Order: order(id, orders.Item{SKU: hotSKU, Quantity: 1})}}}
			if _, err := p.store.Commit(ctx, one, orders.Fences{hotSKU: 1}); !errors.Is(err, orders.ErrStaleFence) {
				return fmt.Errorf("got %v, want a stale fence", err) //nolint:errorlint // the message, not a chain
			}
			return nil
		}},
		{"Order", func(ctx context.Context) error { _, err := p.store.Order(ctx, batch.Placed[0].Order.ID); return err }},
		{"Stock", func(ctx context.Context) error { _, err := p.store.Stock(ctx, hotSKU); return err }},
		{"Cancel", func(ctx context.Context) error {
			_, _, err := p.store.Cancel(ctx, batch.Placed[1].Order.ID, orders.Fences{hotSKU: p.nextFence()}, p.clk.Now())
			return err
		}},
		{"Restock", func(ctx context.Context) error { _, err := p.store.Restock(ctx, hotSKU, 5, p.nextFence()); return err }},
		{"SetStock", func(ctx context.Context) error {
			_, _, err := p.store.SetStock(ctx, hotSKU, orders.StockSet{Available: 1_000_000}, p.nextFence())
			return err
		}},
		// The listings: a page from the start and one after a cursor.
		{"SKUs(first page)", func(ctx context.Context) error { _, err := p.store.SKUs(ctx, "", 21); return err }},
		{"SKUs(after a cursor)", func(ctx context.Context) error { _, err := p.store.SKUs(ctx, hotSKU, 21); return err }},
		{"Orders(newest page)", func(ctx context.Context) error { _, err := p.store.Orders(ctx, "", "", 21); return err }},
		{"Orders(a client's newest page)", func(ctx context.Context) error { _, err := p.store.Orders(ctx, "cli_x", "", 21); return err }},
		{"Orders(before a cursor)", func(ctx context.Context) error {
			_, err := p.store.Orders(ctx, "", batch.Placed[0].Order.ID, 21)
			return err
		}},
		{"Commit(holds)", func(ctx context.Context) error {
			holds = orders.Batch{}
			for i := range 4 {
				id := fmt.Sprintf("h-%d-%d", p.round, i)
				holds.Placed = append(holds.Placed, orders.Placement{Order: order(id, orders.Item{SKU: hotSKU, Quantity: 1}),
					Hold: &orders.Hold{TTL: time.Second}, Key: "k-" + id, Hash: "h"})
			}
			_, err := p.store.Commit(ctx, holds, orders.Fences{hotSKU: p.nextFence()})
			return err
		}},
		{"Reservation", func(ctx context.Context) error {
			_, err := p.store.Reservation(ctx, holds.Placed[0].Order.ID)
			return err
		}},
		{"Reservations(a client's newest page)", func(ctx context.Context) error {
			_, err := p.store.Reservations(ctx, "cli_x", "", 21)
			return err
		}},
		{"Reservations(newest page)", func(ctx context.Context) error { _, err := p.store.Reservations(ctx, "", "", 21); return err }},
		{"Reservations(before a cursor)", func(ctx context.Context) error {
			_, err := p.store.Reservations(ctx, "", holds.Placed[2].Order.ID, 21)
			return err
		}},
		{"Extend", func(ctx context.Context) error {
			_, _, err := p.store.Extend(ctx, holds.Placed[0].Order.ID, time.Minute, orders.Keyed{Key: fmt.Sprintf("x-%d", p.round), Hash: "h"})
			return err
		}},
		{"Confirm", func(ctx context.Context) error {
			id := fmt.Sprintf("c-%d", p.round)
			_, _, err := p.store.Confirm(ctx, orders.Confirmation{HoldID: holds.Placed[1].Order.ID, Order: order(id), Key: "k-" + id, Hash: "h"},
				orders.Fences{hotSKU: p.nextFence()})
			return err
		}},
		{"Release", func(ctx context.Context) error {
			_, _, err := p.store.Release(ctx, holds.Placed[2].Order.ID, orders.Keyed{}, orders.Fences{hotSKU: p.nextFence()})
			return err
		}},
		{"Expired", func(ctx context.Context) error {
			p.clk.Add(2 * time.Second) // the last hold is due; the filler's are not
			due, err = p.store.Expired(ctx, 500)
			if err == nil && len(due) != 1 {
				err = fmt.Errorf("%d holds due, want 1", len(due))
			}
			return err
		}},
		{"Expire", func(ctx context.Context) error {
			n, _, err := p.store.Expire(ctx, []string{due[0].ID}, orders.Fences{hotSKU: p.nextFence()}, orders.Leader{Name: "sweeper", Token: 1})
			if err == nil && n != 1 {
				err = fmt.Errorf("expired %d, want 1", n)
			}
			return err
		}},
		{"HoldAudit", func(ctx context.Context) error { _, err := p.store.HoldAudit(ctx, time.Second, false); return err }},
		// A replay's record past the retention is forgotten by key (the service's
		// records()): the cutoff is before every record, so nothing goes, but the
		// lookup is the one a real Forget makes.
		{"Forget(8 keys)", func(ctx context.Context) error {
			return p.store.Forget(ctx, p.last[:8], p.clk.Now().Add(-time.Hour))
		}},
		// The sweeper's purge of old records, oldest first by created_at, then
		// deleted by key: the cutoff takes the rounds before the last (each round
		// moves the clock 2s, Expired above), so every round has records to delete
		// and the previous batch's, which the next round reads, stay; the filler's
		// records, written after the warm-up, are never old enough.
		{"PurgeRecords", func(ctx context.Context) error {
			_, err := p.store.PurgeRecords(ctx, p.clk.Now().Add(-3*time.Second), 1000, orders.Leader{Name: "sweeper", Token: 1})
			return err
		}},
	}
}

// fill grows orders, order lines, the ledger and the idempotency records to
// fillOrders rows each, through the store, in batches of keyed placements on
// fillSKUs other SKUs: the hot SKU's own rows stay few, so that every read of the
// order path is selective and a sequential scan is a wrong plan, not a fair one.
func fill(ctx context.Context, t testing.TB, store *gormstore.Store, p *orderPath) {
	t.Helper()
	perSKU := int64(fillOrders / fillSKUs)
	for s := range fillSKUs {
		if _, err := store.Restock(ctx, fillSKU(s), perSKU, p.nextFence()); err != nil {
			t.Fatal(err)
		}
	}
	for b := range fillOrders / fillBatch {
		sku := fillSKU(b % fillSKUs)
		batch := orders.Batch{Placed: make([]orders.Placement, fillBatch)}
		for i := range batch.Placed {
			id := fmt.Sprintf("f-%d-%d", b, i)
			batch.Placed[i] = orders.Placement{Order: order(id, orders.Item{SKU: sku, Quantity: 1}), Key: "k-" + id, Hash: "h"}
			if i%5 == 0 { // a fifth are holds, held for longer than the test runs
				batch.Placed[i].Hold = &orders.Hold{TTL: time.Hour}
			}
		}
		if _, err := store.Commit(ctx, batch, orders.Fences{sku: p.nextFence()}); err != nil {
			t.Fatalf("filling, batch %d: %v", b, err)
		}
	}
}

func fillSKU(i int) string { return fmt.Sprintf("F-%03d", i) }

type scanCount struct{ scans, rows int64 }

// seqScans returns the sequential scans of the schema's tables and the rows they
// read, this session's included: pg_stat_force_next_flush makes the session
// report its counters when this statement ends, before the next one reads them.
func seqScans(ctx context.Context, t *testing.T, db *gorm.DB) map[string]scanCount {
	t.Helper()
	db = db.WithContext(ctx)
	if err := db.Exec("SELECT pg_stat_force_next_flush()").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("SELECT pg_stat_clear_snapshot()").Error; err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Relname    string
		SeqScan    int64
		SeqTupRead int64
	}
	if err := db.Raw("SELECT relname, seq_scan, seq_tup_read FROM pg_stat_user_tables WHERE schemaname = current_schema()").
		Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := make(map[string]scanCount, len(rows))
	for _, r := range rows {
		out[r.Relname] = scanCount{r.SeqScan, r.SeqTupRead}
	}
	return out
}

// neverAnalysed fails the test if a table was analysed or vacuumed: its plans
// would have been invalidated, and the check would prove nothing.
func neverAnalysed(ctx context.Context, t *testing.T, db *gorm.DB) {
	t.Helper()
	var rows []struct {
		Relname   string
		Analyses  int64
		Vacuums   int64
		Reltuples float64
	}
	err := db.WithContext(ctx).Raw(`SELECT s.relname, s.analyze_count + s.autoanalyze_count AS analyses,
  s.vacuum_count + s.autovacuum_count AS vacuums, c.reltuples
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.relname IN ?`, planTables).Scan(&rows).Error
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(planTables) {
		t.Fatalf("statistics of %d tables, want %d", len(rows), len(planTables))
	}
	for _, r := range rows {
		if r.Analyses != 0 || r.Vacuums != 0 || r.Reltuples >= 0 {
			t.Fatalf("%s was analysed %d times, vacuumed %d times (reltuples %v): the test needs tables never analysed",
				r.Relname, r.Analyses, r.Vacuums, r.Reltuples)
		}
	}
}

func tableSizes(ctx context.Context, t *testing.T, db *gorm.DB) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range planTables {
		var n int64
		if err := db.WithContext(ctx).Raw(`SELECT COUNT(*) FROM "` + table + `"`).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// captureStatements records the arguments each SQL text last ran with, for
// genericPlans to show their plans.
func captureStatements(db *gorm.DB) *statements {
	s := &statements{vars: map[string][]any{}}
	record := func(tx *gorm.DB) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.vars[tx.Statement.SQL.String()] = append([]any(nil), tx.Statement.Vars...)
	}
	cb := db.Callback()
	_ = cb.Query().After("gorm:query").Register("plantest:capture", record)
	_ = cb.Row().After("gorm:row").Register("plantest:capture", record)
	_ = cb.Raw().After("gorm:raw").Register("plantest:capture", record)
	_ = cb.Create().After("gorm:create").Register("plantest:capture", record)
	_ = cb.Update().After("gorm:update").Register("plantest:capture", record)
	_ = cb.Delete().After("gorm:delete").Register("plantest:capture", record)
	return s
}

type statements struct {
	mu   sync.Mutex
	vars map[string][]any
}

// genericPlans shows the session's prepared statements whose generic plan has a
// sequential scan: the plan itself (EXPLAIN EXECUTE of the driver's statement,
// with the arguments it last ran with) and how often it ran generic and custom.
func genericPlans(ctx context.Context, t *testing.T, db *gorm.DB, stmts *statements) string {
	t.Helper()
	var rows []struct {
		Name         string
		Statement    string
		GenericPlans int64
		CustomPlans  int64
	}
	if err := db.WithContext(ctx).Raw("SELECT name, statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE generic_plans > 0 AND custom_plans > 0").
		Scan(&rows).Error; err != nil {
		return fmt.Sprintf("(pg_prepared_statements: %v)", err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Statement < rows[j].Statement })
	var b strings.Builder
	scanning := 0
	for _, r := range rows {
		stmts.mu.Lock()
		vars, ok := stmts.vars[r.Statement]
		stmts.mu.Unlock()
		if !ok || len(vars) == 0 {
			continue
		}
		args := make([]string, len(vars))
		for i := range vars {
			args[i] = fmt.Sprintf("$%d", i+1)
		}
		explain := db.Explain("EXPLAIN EXECUTE "+r.Name+"("+strings.Join(args, ", ")+")", vars...)
		var plan []string
		if err := db.WithContext(ctx).Raw(explain).Scan(&plan).Error; err != nil {
			fmt.Fprintf(&b, "  %s\n    EXPLAIN EXECUTE: %v\n", abbreviate(r.Statement), err)
			continue
		}
		if !strings.Contains(strings.Join(plan, "\n"), "Seq Scan") {
			continue
		}
		scanning++
		fmt.Fprintf(&b, "  %s\n    prepared by the driver as %s: %d custom then %d generic executions; the generic plan:\n",
			abbreviate(r.Statement), r.Name, r.CustomPlans, r.GenericPlans)
		for _, line := range plan {
			b.WriteString("      " + line + "\n")
		}
	}
	return fmt.Sprintf("of the session's %d prepared statements that switched to a generic plan, %d scan sequentially:\n%s",
		len(rows), scanning, b.String())
}

func abbreviate(sql string) string {
	if len(sql) > 160 {
		return sql[:160] + "…"
	}
	return sql
}

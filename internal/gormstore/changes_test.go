package gormstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// A batch's placements and endings commit in one transaction
// (Store.CommitChanges), on every database: each ending decided on its own, the
// placements together, with the same fences and guards as Commit and End apart.
func TestChanges(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("one transaction, endings refused alone", func(t *testing.T) { testChangesOneTransaction(t, kind) })
			t.Run("a stale fence refuses all", func(t *testing.T) { testChangesStaleFence(t, kind) })
			t.Run("a short total refuses all", func(t *testing.T) { testChangesShort(t, kind) })
			t.Run("caps lowered and raised", func(t *testing.T) { testChangesCaps(t, kind) })
		})
	}
}

// countedStore is a migrated store whose transactions and statements are
// counted.
type countedStore struct {
	*gormstore.Store
	clk        *testenv.Clock
	db         *gorm.DB
	txs, stmts atomic.Int64
}

func newCountedStore(t *testing.T, kind string) *countedStore {
	t.Helper()
	db := openDB(t, kind)
	if _, err := gormstore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	c := &countedStore{db: db, clk: testenv.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))}
	if err := gormstore.CountStatements(db, &c.stmts); err != nil {
		t.Fatal(err)
	}
	if err := gormstore.CountTransactions(db, &c.txs); err != nil {
		t.Fatal(err)
	}
	c.Store = gormstore.New(db, c.clk.Now, 10*time.Second).WithClock(c.clk.Now)
	return c
}

// counted runs write and returns the transactions and statements it sent.
func (c *countedStore) counted(t *testing.T, write func() error) (txs, stmts int64) {
	t.Helper()
	c.txs.Store(0)
	c.stmts.Store(0)
	if err := write(); err != nil {
		t.Fatal(err)
	}
	return c.txs.Load(), c.stmts.Load()
}

// mixed is a batch of prefix p's SKUs A and B: two orders and a hold, then
// a confirm, a release, an expiry, and three endings refused on their own
// (another client's hold, a hold that does not exist, a release of the hold
// the confirm before it ended).
func mixed(p string) orders.Changes {
	return orders.Changes{
		Batch: orders.Batch{
			Placed: []orders.Placement{
				{Order: order(p+"o1", orders.Item{SKU: p + "A", Quantity: 1}), Key: p + "k-o1", Hash: "h"},
				{Order: order(p+"o2", orders.Item{SKU: p + "A", Quantity: 1}, orders.Item{SKU: p + "B", Quantity: 1})},
				{Order: order(p+"h5", orders.Item{SKU: p + "A", Quantity: 1}), Hold: &orders.Hold{TTL: time.Hour}},
			},
			Refused: []orders.Placement{{Key: p + "k-short", Hash: "h", Short: []string{p + "B"}}},
		},
		Endings: []orders.Ending{
			{Confirm: &orders.Confirmation{HoldID: p + "h1", Order: order(p + "c1"), Key: p + "k-c1", Hash: "h"}},
			{Release: &orders.Release{HoldID: p + "h2", Keyed: orders.Keyed{Key: p + "k-r2", Hash: "h"}}},
			{Expire: &orders.Expiry{HoldIDs: []string{p + "h3"}, Leader: orders.Leader{Name: "job:sweeper", Token: 1}}},
			{Release: &orders.Release{HoldID: p + "h4", Owner: "cli_b"}},
			{Confirm: &orders.Confirmation{HoldID: p + "h-none", Order: order(p + "c-none")}},
			{Release: &orders.Release{HoldID: p + "h1"}},
		},
	}
}

// setUp stocks prefix p's SKUs and makes the holds mixed ends: h1 (A 2), h2
// (A 1, B 1), h3 (B 1, past its expiry once the clock moves), h4 (cli_a's).
func (c *countedStore) setUp(t *testing.T, p string) {
	t.Helper()
	ctx := context.Background()
	mustRestock(t, c.Store, p+"A", 10, 0)
	mustRestock(t, c.Store, p+"B", 10, 0)
	h4 := order(p+"h4", orders.Item{SKU: p + "A", Quantity: 1})
	h4.ClientID = "cli_a"
	for _, pl := range []orders.Placement{
		{Order: order(p+"h1", orders.Item{SKU: p + "A", Quantity: 2}), Hold: &orders.Hold{TTL: time.Hour}},
		{Order: order(p+"h2", orders.Item{SKU: p + "A", Quantity: 1}, orders.Item{SKU: p + "B", Quantity: 1}), Hold: &orders.Hold{TTL: time.Hour}},
		{Order: order(p+"h3", orders.Item{SKU: p + "B", Quantity: 1}), Hold: &orders.Hold{TTL: time.Second}},
		{Order: h4, Hold: &orders.Hold{TTL: time.Hour}, MaxHeld: 10},
	} {
		if _, err := c.Commit(ctx, orders.Batch{Placed: []orders.Placement{pl}}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// wantMixedAnswers checks the endings' answers to mixed and what they left.
func wantMixedAnswers(t *testing.T, s *gormstore.Store, p string, out []orders.Ended) {
	t.Helper()
	if len(out) != 6 {
		t.Fatalf("%d answers for 6 endings", len(out))
	}
	for i, want := range []error{nil, nil, nil, orders.ErrNotFound, orders.ErrNotFound, orders.ErrHoldConfirmed} {
		if got := out[i].Err; (want == nil && got != nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("ending %d: %v, want %v", i, got, want)
		}
	}
	if out[0].Order.ID != p+"c1" || out[2].Expired != 1 {
		t.Errorf("the confirm's order %+v, the expiry ended %d; want %sc1 and 1", out[0].Order, out[2].Expired, p)
	}
	for id, st := range map[string]orders.HoldStatus{"h1": orders.HoldConfirmed, "h2": orders.HoldReleased,
		"h3": orders.HoldExpired, "h4": orders.HoldHeld, "h5": orders.HoldHeld} {
		wantStatus(t, s, p+id, st)
	}
	// A: 10, held 2+1+1 by h1, h2, h4; the batch sells 2, holds 1 (h5),
	// confirms h1's 2, gives h2's 1 back. B: 10, held by h2 and h3; the
	// batch sells 1, gives h2's and h3's back.
	wantStock(t, s, orders.Stock{SKU: p + "A", Available: 4, Held: 2, Sold: 4, Stocked: 10})
	wantStock(t, s, orders.Stock{SKU: p + "B", Available: 9, Held: 0, Sold: 1, Stocked: 10})
}

// One transaction where Commit and End took two, and fewer statements: one
// read of the clock, one guarded update per SKU, one INSERT per kind of row.
// The endings refused are refused alone, and every SKU's events are numbered
// with no gap: the placements' first, then the endings', each with the
// counters after it.
func testChangesOneTransaction(t *testing.T, kind string) {
	c := newCountedStore(t, kind)
	ctx := context.Background()
	c.setUp(t, "x-")
	c.setUp(t, "")
	c.clk.Add(2 * time.Second) // h3 expires

	apart := mixed("x-")
	var outApart []orders.Ended
	txsApart, stmtsApart := c.counted(t, func() error {
		if _, err := c.Commit(ctx, apart.Batch, orders.Fences{"x-A": 10, "x-B": 10}); err != nil {
			return err
		}
		var err error
		outApart, _, err = c.End(ctx, apart.Endings, orders.Fences{"x-A": 11, "x-B": 11})
		return err
	})
	wantMixedAnswers(t, c.Store, "x-", outApart)

	var out []orders.Ended
	var after map[string]int64
	txs, stmts := c.counted(t, func() error {
		var err error
		out, after, err = c.CommitChanges(ctx, mixed(""), orders.Fences{"A": 10, "B": 10})
		return err
	})
	wantMixedAnswers(t, c.Store, "", out)
	if after["A"] != 4 || after["B"] != 9 {
		t.Errorf("available after %v; want A 4, B 9", after)
	}
	if txsApart != 2 || txs != 1 {
		t.Errorf("transactions: %d together, %d apart; want 1 and 2", txs, txsApart)
	}
	// Saved at least: a read of the clock, an update per SKU, the INSERTs of
	// the ledger, the orders and their lines a second time.
	if stmts > stmtsApart-6 {
		t.Errorf("statements: %d together, %d apart; want at least 6 fewer", stmts, stmtsApart)
	}
	t.Logf("%s: %d statements in 1 transaction; %d in 2 apart", kind, stmts, stmtsApart)

	for _, sku := range []string{"A", "B"} {
		wantEventChain(t, c.db, sku)
	}
	// A's batch events, in seq order: the placements' (o1, o2, h5), then the
	// endings' (h1 confirmed, h2 released).
	var types []string
	c.db.Raw("SELECT type FROM stock_events WHERE sku = 'A' ORDER BY seq DESC LIMIT 5").Scan(&types)
	want := []string{string(orders.EventReservationReleased), string(orders.EventReservationConfirmed),
		string(orders.EventReservationCreated), string(orders.EventOrderPlaced), string(orders.EventOrderPlaced)}
	if len(types) != len(want) {
		t.Fatalf("A's last events %v; want %v (newest first)", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Errorf("A's last events %v; want %v (newest first)", types, want)
			break
		}
	}
	var records int64
	c.db.Raw("SELECT COUNT(*) FROM idempotency_records WHERE idem_key IN ?", []string{"k-o1", "k-short", "k-c1", "k-r2"}).Scan(&records)
	if records != 4 {
		t.Errorf("%d of the batch's 4 records", records)
	}
	if a, err := c.Audit(ctx, true, time.Hour); err != nil || !a.Consistent {
		t.Errorf("deep audit: %+v %v", a, err)
	}
}

// wantEventChain checks sku's events: numbered 1, 2, ... with no gap, each
// one's counters its predecessor's plus its change, the last's the row's.
func wantEventChain(t *testing.T, db *gorm.DB, sku string) {
	t.Helper()
	var evs []struct {
		Seq, DAvailable, DReserved, DSold, Available, Reserved, Sold int64
	}
	db.Raw("SELECT seq, d_available, d_reserved, d_sold, available, reserved, sold FROM stock_events WHERE sku = ? ORDER BY seq", sku).Scan(&evs)
	var row struct{ Available, Reserved, Sold, EventSeq int64 }
	db.Raw("SELECT available, reserved, sold, event_seq FROM skus WHERE sku = ?", sku).Scan(&row)
	if len(evs) == 0 || int64(len(evs)) != row.EventSeq {
		t.Fatalf("%s: %d events, event_seq %d", sku, len(evs), row.EventSeq)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("%s: event %d numbered %d", sku, i+1, e.Seq)
		}
		if i == 0 {
			continue
		}
		p := evs[i-1]
		if e.Available != p.Available+e.DAvailable || e.Reserved != p.Reserved+e.DReserved || e.Sold != p.Sold+e.DSold {
			t.Errorf("%s: event %d %+v after %+v", sku, e.Seq, e, p)
		}
	}
	if l := evs[len(evs)-1]; l.Available != row.Available || l.Reserved != row.Reserved || l.Sold != row.Sold {
		t.Errorf("%s: the last event's counters %+v; the row's %+v", sku, l, row)
	}
}

// nothingOf checks that the mixed batch of prefix "" wrote nothing.
func nothingOf(t *testing.T, c *countedStore, seqA, seqB int64) {
	t.Helper()
	for id, st := range map[string]orders.HoldStatus{"h1": orders.HoldHeld, "h2": orders.HoldHeld, "h4": orders.HoldHeld} {
		wantStatus(t, c.Store, id, st)
	}
	wantStock(t, c.Store, orders.Stock{SKU: "A", Available: 6, Held: 4, Stocked: 10})
	wantStock(t, c.Store, orders.Stock{SKU: "B", Available: 8, Held: 2, Stocked: 10})
	var n int64
	c.db.Raw("SELECT COUNT(*) FROM orders").Scan(&n)
	if n != 0 {
		t.Errorf("%d orders written", n)
	}
	c.db.Raw("SELECT COUNT(*) FROM idempotency_records").Scan(&n)
	if n != 0 {
		t.Errorf("%d records written", n)
	}
	c.db.Raw("SELECT COUNT(*) FROM stock_events WHERE (sku = 'A' AND seq > ?) OR (sku = 'B' AND seq > ?)", seqA, seqB).Scan(&n)
	if n != 0 {
		t.Errorf("%d events written", n)
	}
	wantEventChain(t, c.db, "A")
	wantEventChain(t, c.db, "B")
}

func eventSeq(c *countedStore, sku string) int64 {
	var n int64
	c.db.Raw("SELECT event_seq FROM skus WHERE sku = ?", sku).Scan(&n)
	return n
}

// A token below the last committed for one SKU refuses the whole
// transaction, the other SKU's update (made first) and the endings included.
func testChangesStaleFence(t *testing.T, kind string) {
	c := newCountedStore(t, kind)
	ctx := context.Background()
	c.setUp(t, "")
	if _, err := c.Restock(ctx, "B", 0, 7); err != nil { // B's last token: 7
		t.Fatal(err)
	}
	seqA, seqB := eventSeq(c, "A"), eventSeq(c, "B")
	_, _, err := c.CommitChanges(ctx, mixed(""), orders.Fences{"A": 10, "B": 7})
	var stale *orders.StaleFenceError
	if !errors.As(err, &stale) || stale.SKU != "B" || stale.Last != 7 {
		t.Fatalf("a batch under B's committed token: %v; want a stale fence of B", err)
	}
	nothingOf(t, c, seqA, seqB)
	// Under a token above it, the same batch commits.
	out, _, err := c.CommitChanges(ctx, mixed(""), orders.Fences{"A": 10, "B": 8})
	if err != nil || out[1].Err != nil {
		t.Fatalf("the batch again, under a newer token: %v %+v", err, out)
	}
}

// An order short of stock fails the placements, and with them the
// transaction: the endings beside it are not written either (the service
// decides again and commits anew).
func testChangesShort(t *testing.T, kind string) {
	c := newCountedStore(t, kind)
	ctx := context.Background()
	c.setUp(t, "")
	seqA, seqB := eventSeq(c, "A"), eventSeq(c, "B")
	ch := mixed("")
	ch.Placed = append(ch.Placed, orders.Placement{Order: order("o-big", orders.Item{SKU: "B", Quantity: 9})})
	_, _, err := c.CommitChanges(ctx, ch, orders.Fences{"A": 10, "B": 10})
	var short *orders.InsufficientStockError
	if !errors.As(err, &short) || len(short.SKUs) != 1 || short.SKUs[0] != "B" || short.Available["B"] != 8 {
		t.Fatalf("a batch taking 10 of B's 8: %v; want short of B, 8 left", err)
	}
	nothingOf(t, c, seqA, seqB)
}

// A client's hold released and its new hold placed in one batch change one
// counter twice (and its customer's): lowered, then raised under the cap.
// PostgreSQL cannot change one row twice in one statement, so the two must
// not ride in one.
func testChangesCaps(t *testing.T, kind string) {
	c := newCountedStore(t, kind)
	ctx := context.Background()
	mustRestock(t, c.Store, "A", 10, 0)
	if _, err := c.Commit(ctx, orders.Batch{Placed: []orders.Placement{
		capHold("h1", "cli_a", "cus_1", 5, orders.Item{SKU: "A", Quantity: 1}),
		capHold("h2", "cli_a", "cus_2", 5, orders.Item{SKU: "A", Quantity: 2}),
	}}, nil); err != nil {
		t.Fatal(err)
	}
	out, _, err := c.CommitChanges(ctx, orders.Changes{
		Batch: orders.Batch{Placed: []orders.Placement{
			capHold("h3", "cli_a", "cus_1", 5, orders.Item{SKU: "A", Quantity: 4}),
			capOrder("o1", "cli_a", "cus_2", orders.Item{SKU: "A", Quantity: 1}),
		}},
		Endings: []orders.Ending{
			{Release: &orders.Release{HoldID: "h1", Owner: "cli_a"}},
			{Confirm: &orders.Confirmation{HoldID: "h2", Order: order("c2"), Owner: "cli_a"}},
		},
	}, nil)
	if err != nil || out[0].Err != nil || out[1].Err != nil {
		t.Fatalf("release, confirm, hold and order: %v %+v", err, out)
	}
	wantCaps(t, c.Store,
		map[orders.ClientSKU]int64{{ClientID: "cli_a", SKU: "A"}: 4}, // h3 only
		map[orders.CustomerSKU]int64{
			{SKU: "A", ClientID: "cli_a", Customer: "cus_1"}: 4, // h3
			{SKU: "A", ClientID: "cli_a", Customer: "cus_2"}: 3, // h2 confirmed, o1
		})
	wantCapAudit(t, c.Store, true)
	// A release and a hold of one counter in one batch: the release first,
	// so 0 + 2 is within the cap.
	if _, _, err := c.CommitChanges(ctx, orders.Changes{
		Batch:   orders.Batch{Placed: []orders.Placement{capHold("h4", "cli_a", "", 5, orders.Item{SKU: "A", Quantity: 2})}},
		Endings: []orders.Ending{{Release: &orders.Release{HoldID: "h3"}}},
	}, nil); err != nil {
		t.Fatalf("a release and a hold within the cap: %v", err)
	}
	wantCaps(t, c.Store, map[orders.ClientSKU]int64{{ClientID: "cli_a", SKU: "A"}: 2}, nil)
	// Past the cap, the placements are refused whole, the endings with them.
	if _, err := c.Commit(ctx, orders.Batch{Placed: []orders.Placement{
		capHold("h6", "cli_c", "", 5, orders.Item{SKU: "A", Quantity: 1}),
	}}, nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = c.CommitChanges(ctx, orders.Changes{
		Batch:   orders.Batch{Placed: []orders.Placement{capHold("h5", "cli_a", "", 5, orders.Item{SKU: "A", Quantity: 4})}},
		Endings: []orders.Ending{{Release: &orders.Release{HoldID: "h6"}}},
	}, nil)
	if !errors.Is(err, orders.ErrHoldQuotaExceeded) {
		t.Fatalf("a hold past the cap beside a release: %v; want the cap's refusal", err)
	}
	wantStatus(t, c.Store, "h6", orders.HoldHeld)
	wantCaps(t, c.Store, map[orders.ClientSKU]int64{{ClientID: "cli_a", SKU: "A"}: 2}, nil)
	wantCapAudit(t, c.Store, true)
}

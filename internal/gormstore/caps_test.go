package gormstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// I9 in the store: the counters follow the holds and orders through every
// ending, and the database refuses a raise past a cap, whatever the locks did.
func TestCaps(t *testing.T) {
	for _, kind := range testenv.DatabaseKinds() {
		t.Run(kind, func(t *testing.T) {
			t.Run("units held per client", func(t *testing.T) { testClientCap(t, kind) })
			t.Run("units per customer", func(t *testing.T) { testCustomerLimit(t, kind) })
			t.Run("guarded without locks", func(t *testing.T) { testCapsUnderRace(t, kind) })
			t.Run("migration counts the history", func(t *testing.T) { testCapsMigration(t, kind) })
		})
	}
}

// capHold is a hold of client (cap maxHeld) for customer.
func capHold(id, client, customer string, maxHeld int64, items ...orders.Item) orders.Placement {
	o := order(id, items...)
	o.ClientID, o.Customer = client, customer
	return orders.Placement{Order: o, Hold: &orders.Hold{TTL: time.Minute}, MaxHeld: maxHeld}
}

// capOrder is an order of client for customer.
func capOrder(id, client, customer string, items ...orders.Item) orders.Placement {
	o := order(id, items...)
	o.ClientID, o.Customer = client, customer
	return orders.Placement{Order: o}
}

func commitOne(s *gormstore.Store, p orders.Placement) error {
	_, err := s.Commit(context.Background(), orders.Batch{Placed: []orders.Placement{p}}, nil)
	return err
}

func wantCaps(t *testing.T, s *gormstore.Store, held map[orders.ClientSKU]int64, units map[orders.CustomerSKU]int64) {
	t.Helper()
	var hk []orders.ClientSKU
	for k := range held {
		hk = append(hk, k)
	}
	var uk []orders.CustomerSKU
	for k := range units {
		uk = append(uk, k)
	}
	c, err := s.Caps(context.Background(), hk, uk)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range held {
		if c.Held[k] != n {
			t.Errorf("units held by %+v: %d, want %d", k, c.Held[k], n)
		}
	}
	for k, n := range units {
		if c.Units[k] != n {
			t.Errorf("units of %+v: %d, want %d", k, c.Units[k], n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

func wantCapAudit(t *testing.T, s *gormstore.Store, consistent bool) orders.Audit {
	t.Helper()
	a, err := s.Audit(context.Background(), true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if a.Caps == nil || a.Consistent != consistent || (consistent && (a.Caps.OverLimit != 0 || a.Caps.Miscounted != 0)) {
		t.Fatalf("deep audit: consistent %v, caps %+v; want consistent %v", a.Consistent, a.Caps, consistent)
	}
	return a
}

func testClientCap(t *testing.T, kind string) {
	s, clock := newHoldStore(t, kind)
	ctx := context.Background()
	mustRestock(t, s, "A-1", 100, 1)
	a1 := func(n int) orders.Item { return orders.Item{SKU: "A-1", Quantity: n} }
	c1 := orders.ClientSKU{ClientID: "c1", SKU: "A-1"}

	if err := commitOne(s, capHold("h1", "c1", "", 5, a1(3))); err != nil {
		t.Fatal(err)
	}
	// 3 + 3 > 5: refused whole, nothing written.
	err := commitOne(s, capHold("h2", "c1", "", 5, a1(3)))
	if !errors.Is(err, orders.ErrHoldQuotaExceeded) {
		t.Fatalf("a hold past the cap: %v, want ErrHoldQuotaExceeded", err)
	}
	if _, err := s.Reservation(ctx, "h2"); !errors.Is(err, orders.ErrNotFound) {
		t.Fatalf("the refused hold: %v, want none", err)
	}
	wantStock(t, s, orders.Stock{SKU: "A-1", Available: 97, Held: 3, Stocked: 100})
	// Up to the cap exactly; orders and the admin token's holds do not count.
	if err := commitOne(s, capHold("h3", "c1", "", 5, a1(2))); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capOrder("o1", "c1", "", a1(10))); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capHold("h4", "", "", 0, a1(20))); err != nil {
		t.Fatal(err)
	}
	// In one batch the counter is raised once by the total, against the cap.
	_, err = s.Commit(ctx, orders.Batch{Placed: []orders.Placement{capHold("h5", "c2", "", 4, a1(2)), capHold("h6", "c2", "", 4, a1(3))}}, nil)
	if !errors.Is(err, orders.ErrHoldQuotaExceeded) {
		t.Fatalf("a batch past the cap: %v", err)
	}
	wantCaps(t, s, map[orders.ClientSKU]int64{c1: 5, {ClientID: "c2", SKU: "A-1"}: 0}, nil)

	// Units come back: a release, a partial confirm (all its units leave
	// the holds), an expiry.
	if _, _, err := s.Release(ctx, "h1", orders.Keyed{}, nil); err != nil {
		t.Fatal(err)
	}
	wantCaps(t, s, map[orders.ClientSKU]int64{c1: 2}, nil)
	if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h3", Order: order("o2", a1(1))}, nil); err != nil {
		t.Fatal(err)
	}
	wantCaps(t, s, map[orders.ClientSKU]int64{c1: 0}, nil)
	if err := commitOne(s, capHold("h7", "c1", "", 5, a1(5))); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Minute)
	if n, _, err := s.Expire(ctx, []string{"h7"}, nil, orders.Leader{Name: "job:sweeper", Token: 1}); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	wantCaps(t, s, map[orders.ClientSKU]int64{c1: 0}, nil)
	// A lower cap holds the next raise; the units held stay.
	if err := commitOne(s, capHold("h8", "c1", "", 5, a1(4))); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capHold("h9", "c1", "", 3, a1(1))); !errors.Is(err, orders.ErrHoldQuotaExceeded) {
		t.Fatalf("a hold past a lowered cap: %v", err)
	}
	wantCapAudit(t, s, true)
	// The deep audit sees a counter that is off.
	if err := s.DB().Exec("UPDATE client_sku_holds SET held = held - 1 WHERE client_id = 'c1'").Error; err != nil {
		t.Fatal(err)
	}
	if a := wantCapAudit(t, s, false); a.Caps.Miscounted != 1 {
		t.Fatalf("caps audit %+v, want 1 miscounted", a.Caps)
	}
	// And the database refuses a counter past its cap, whoever writes it.
	if err := s.DB().Exec("UPDATE client_sku_holds SET held = 6 WHERE client_id = 'c1'").Error; err == nil {
		t.Fatal("the CHECK let a counter past its cap")
	}
}

func testCustomerLimit(t *testing.T, kind string) {
	s, clock := newHoldStore(t, kind)
	ctx := context.Background()
	two := int64(2)
	st, created, err := s.SetStock(ctx, "B-2", orders.StockSet{Available: 100, MaxPerCustomer: &two}, 1)
	if err != nil || !created || st.MaxPerCustomer == nil || *st.MaxPerCustomer != 2 {
		t.Fatalf("set: %+v %v %v", st, created, err)
	}
	// Left out, it is kept.
	if st, _, err = s.SetStock(ctx, "B-2", orders.StockSet{Available: 100}, 2); err != nil || st.MaxPerCustomer == nil || *st.MaxPerCustomer != 2 {
		t.Fatalf("set without a limit: %+v %v", st, err)
	}
	if st, err = s.Stock(ctx, "B-2"); err != nil || st.MaxPerCustomer == nil || *st.MaxPerCustomer != 2 {
		t.Fatalf("stock: %+v %v", st, err)
	}
	b2 := func(n int) orders.Item { return orders.Item{SKU: "B-2", Quantity: n} }
	bob := orders.CustomerSKU{SKU: "B-2", ClientID: "c1", Customer: "bob"}

	if err := commitOne(s, capOrder("o1", "c1", "bob", b2(1))); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capHold("h1", "c1", "bob", 100, b2(1))); err != nil {
		t.Fatal(err)
	}
	for _, p := range []orders.Placement{capOrder("o2", "c1", "bob", b2(1)), capHold("h2", "c1", "bob", 100, b2(1))} {
		if err := commitOne(s, p); !errors.Is(err, orders.ErrCustomerLimitExceeded) {
			t.Fatalf("%s past the limit: %v, want ErrCustomerLimitExceeded", p.Order.ID, err)
		}
	}
	// Another client's bob, and a request with no customer, are not bob.
	if err := commitOne(s, capOrder("o3", "c2", "bob", b2(2))); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capOrder("o4", "c1", "", b2(5))); err != nil {
		t.Fatal(err)
	}
	wantStock(t, s, orders.Stock{SKU: "B-2", Available: 91, Held: 1, Sold: 8, Stocked: 100, MaxPerCustomer: st.MaxPerCustomer})
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{bob: 2, {SKU: "B-2", ClientID: "c2", Customer: "bob"}: 2})

	// A cancel gives units back; a confirm keeps them (held to ordered).
	if _, _, err := s.Cancel(ctx, "o1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{bob: 1})
	if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h1", Order: order("o5")}, nil); err != nil {
		t.Fatal(err)
	}
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{bob: 1})
	// A partial confirm gives back the units it does not confirm; a
	// release and an expiry all of them.
	if err := commitOne(s, capHold("h3", "c2", "ann", 100, b2(2))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Confirm(ctx, orders.Confirmation{HoldID: "h3", Order: order("o6", b2(1))}, nil); err != nil {
		t.Fatal(err)
	}
	ann := orders.CustomerSKU{SKU: "B-2", ClientID: "c2", Customer: "ann"}
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{ann: 1})
	if err := commitOne(s, capHold("h4", "c1", "bob", 100, b2(1))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Release(ctx, "h4", orders.Keyed{}, nil); err != nil {
		t.Fatal(err)
	}
	if err := commitOne(s, capHold("h5", "c1", "bob", 100, b2(1))); err != nil {
		t.Fatal(err)
	}
	clock.Add(2 * time.Minute)
	if n, _, err := s.Expire(ctx, []string{"h5"}, nil, orders.Leader{Name: "job:sweeper", Token: 1}); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{bob: 1, ann: 1})
	wantCapAudit(t, s, true)

	// 0 removes the limit.
	zero := int64(0)
	if st, _, err = s.SetStock(ctx, "B-2", orders.StockSet{Available: 100, MaxPerCustomer: &zero}, 3); err != nil || st.MaxPerCustomer != nil {
		t.Fatalf("limit removed: %+v %v", st, err)
	}
	if err := commitOne(s, capOrder("o7", "c1", "bob", b2(10))); err != nil {
		t.Fatal(err)
	}
	wantCaps(t, s, nil, map[orders.CustomerSKU]int64{bob: 11})
	wantCapAudit(t, s, true)
}

// Without the per-SKU locks (nil fences, concurrent commits), the database
// alone keeps each counter within its cap: exactly the cap is taken.
func testCapsUnderRace(t *testing.T, kind string) {
	s, _ := newStore(t, kind)
	mustRestock(t, s, "R-1", 1000, 1)
	const holders, maxHeld, limit = 24, 7, 5
	five := int64(limit)
	if _, _, err := s.SetStock(context.Background(), "R-2", orders.StockSet{Available: 1000, MaxPerCustomer: &five}, 1); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*holders)
	for i := range holders {
		wg.Go(func() {
			errs <- commitOne(s, capHold(fmt.Sprintf("h%d", i), "c1", "", maxHeld, orders.Item{SKU: "R-1", Quantity: 1}))
		})
		wg.Go(func() {
			p := capOrder(fmt.Sprintf("o%d", i), "c1", "bob", orders.Item{SKU: "R-2", Quantity: 1})
			if i%2 == 0 {
				p = capHold(fmt.Sprintf("hb%d", i), "c1", "bob", 1000, orders.Item{SKU: "R-2", Quantity: 1})
			}
			errs <- commitOne(s, p)
		})
	}
	wg.Wait()
	close(errs)
	ok, capped := 0, 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, orders.ErrHoldQuotaExceeded), errors.Is(err, orders.ErrCustomerLimitExceeded):
			capped++
		case strings.Contains(err.Error(), "deadlock"), strings.Contains(err.Error(), "database is locked"):
			t.Fatalf("commit: %v", err)
		default:
			t.Fatalf("commit: %v", err)
		}
	}
	if ok != maxHeld+limit || capped != 2*holders-ok {
		t.Fatalf("%d accepted, %d refused for a cap; want %d accepted", ok, capped, maxHeld+limit)
	}
	wantStock(t, s, orders.Stock{SKU: "R-1", Available: 1000 - maxHeld, Held: maxHeld, Stocked: 1000})
	wantCaps(t, s, map[orders.ClientSKU]int64{{ClientID: "c1", SKU: "R-1"}: maxHeld},
		map[orders.CustomerSKU]int64{{SKU: "R-2", ClientID: "c1", Customer: "bob"}: limit})
	wantCapAudit(t, s, true)
}

// A database of schema 7 with live and ended holds and orders of clients and
// customers migrates to counters that match them.
func testCapsMigration(t *testing.T, kind string) {
	db := openDB(t, kind)
	ctx := context.Background()
	if _, err := gormstore.MigrateTo(ctx, db, 7); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	later := now.Add(time.Hour)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO skus (sku, available, stocked, sold, reserved, fence, event_seq, updated_at) VALUES ('A-1', 80, 100, 8, 12, 1, 0, ?)`, []any{now}},
		{`INSERT INTO reservations (id, status, created_at, expires_at, client_id, customer) VALUES
		  ('h1', 'held', ?, ?, 'c1', 'bob'), ('h2', 'held', ?, ?, 'c1', ''), ('h3', 'released', ?, ?, 'c1', 'bob'),
		  ('h4', 'held', ?, ?, '', 'ann')`, []any{now, later, now, later, now, later, now, later}},
		{`INSERT INTO reservation_lines (reservation_id, sku, quantity) VALUES ('h1', 'A-1', 2), ('h2', 'A-1', 3), ('h3', 'A-1', 4), ('h4', 'A-1', 7)`, nil},
		{`INSERT INTO orders (id, status, created_at, client_id, customer) VALUES
		  ('o1', 'placed', ?, 'c1', 'bob'), ('o2', 'cancelled', ?, 'c1', 'bob'), ('o3', 'placed', ?, 'c2', 'bob')`, []any{now, now, now}},
		{`INSERT INTO order_lines (order_id, sku, quantity) VALUES ('o1', 'A-1', 5), ('o2', 'A-1', 6), ('o3', 'A-1', 3)`, nil},
	} {
		if err := db.Exec(q.sql, q.args...).Error; err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if n, err := gormstore.Migrate(ctx, db); err != nil || n != gormstore.MigrationsAfter(7) {
		t.Fatalf("migrate: %d applied, %v", n, err)
	}
	s := gormstore.New(db, time.Now, 10*time.Second)
	wantCaps(t, s, map[orders.ClientSKU]int64{{ClientID: "c1", SKU: "A-1"}: 5, {ClientID: "", SKU: "A-1"}: 0},
		map[orders.CustomerSKU]int64{
			{SKU: "A-1", ClientID: "c1", Customer: "bob"}: 7,
			{SKU: "A-1", ClientID: "c2", Customer: "bob"}: 3,
			{SKU: "A-1", ClientID: "", Customer: "ann"}:   7,
		})
	a, err := s.Audit(ctx, true, time.Hour)
	if err != nil || a.Caps == nil || a.Caps.OverLimit != 0 || a.Caps.Miscounted != 0 {
		t.Fatalf("audit after the migration: %+v %v", a.Caps, err)
	}
	// The counters go on from there: c1 holds 5, and may hold 1 more of 6.
	if err := commitOne(s, capHold("h5", "c1", "", 6, orders.Item{SKU: "A-1", Quantity: 2})); !errors.Is(err, orders.ErrHoldQuotaExceeded) {
		t.Fatalf("a hold past the cap after the migration: %v", err)
	}
	if err := commitOne(s, capHold("h6", "c1", "", 6, orders.Item{SKU: "A-1", Quantity: 1})); err != nil {
		t.Fatal(err)
	}
}

// The counters cost a batch no statement of its own on PostgreSQL (they lead
// one of its INSERTs, beside the events), and one per kind elsewhere: a batch
// of holds of a client for a customer against the same batch of the admin
// token's, and their releases.
func TestCapsRideInTheBatchStatements(t *testing.T) {
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
			three := int64(3)
			for _, sku := range []string{"A-1", "B-2"} {
				if _, _, err := s.SetStock(ctx, sku, orders.StockSet{Available: 100, MaxPerCustomer: &three}, 1); err != nil {
					t.Fatal(err)
				}
			}
			batch := func(prefix, client, customer string) orders.Batch {
				return orders.Batch{Placed: []orders.Placement{
					capHold(prefix+"h1", client, customer, 10, orders.Item{SKU: "A-1", Quantity: 1}),
					capHold(prefix+"h2", client, customer, 10, orders.Item{SKU: "A-1", Quantity: 1}, orders.Item{SKU: "B-2", Quantity: 2}),
					capOrder(prefix+"o1", client, customer, orders.Item{SKU: "B-2", Quantity: 1}),
				}}
			}
			count := func(what string, f func() error) int64 {
				t.Helper()
				sent.Store(0)
				if err := f(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				return sent.Load()
			}
			extra := map[bool]int64{true: 0, false: 2}[kind == testenv.Postgres]
			plain := count("the admin's batch", func() error { _, err := s.Commit(ctx, batch("a", "", ""), nil); return err })
			capped := count("the client's batch", func() error { _, err := s.Commit(ctx, batch("c", "c1", "bob"), nil); return err })
			t.Logf("a batch of 2 holds and an order: %d statements without counters, %d with", plain, capped)
			if capped != plain+extra {
				t.Errorf("a batch: %d statements with the counters, %d without; want %d", capped, plain, plain+extra)
			}
			ends := func(prefix string) func() error {
				return func() error {
					_, _, err := s.End(ctx, []orders.Ending{{Release: &orders.Release{HoldID: prefix + "h1"}}, {Release: &orders.Release{HoldID: prefix + "h2"}}}, nil)
					return err
				}
			}
			plain, capped = count("the admin's releases", ends("a")), count("the client's releases", ends("c"))
			t.Logf("two releases: %d statements without counters, %d with", plain, capped)
			if capped != plain+extra {
				t.Errorf("releases: %d statements with the counters, %d without; want %d", capped, plain, plain+extra)
			}
			wantCaps(t, s, map[orders.ClientSKU]int64{{ClientID: "c1", SKU: "A-1"}: 0},
				map[orders.CustomerSKU]int64{{SKU: "B-2", ClientID: "c1", Customer: "bob"}: 1})
			wantCapAudit(t, s, true)
		})
	}
}

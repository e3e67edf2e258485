package gormstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
)

// proxiedStores returns a store whose connections to a fresh PostgreSQL
// schema pass through a PGProxy, and one that reads the schema directly.
func proxiedStores(t *testing.T) (proxied, direct *gormstore.Store, proxy *testenv.PGProxy) {
	t.Helper()
	dbURL := testenv.NewDatabase(t, testenv.Postgres)
	proxy, viaProxy := testenv.NewPGProxyFor(t, dbURL)
	open := func(u string) *gormstore.Store {
		db, err := gormstore.Open(u)
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := db.DB()
		t.Cleanup(func() { _ = sqlDB.Close() })
		return gormstore.New(db, time.Now, 10*time.Second)
	}
	direct = open(dbURL)
	if _, err := gormstore.Migrate(context.Background(), direct.DB()); err != nil {
		t.Fatal(err)
	}
	return open(viaProxy), direct, proxy
}

// wantUnknown fails unless err is the outcome-unknown error, a database one.
func wantUnknown(t *testing.T, what string, err error) {
	t.Helper()
	var dep *orders.DependencyError
	if !errors.Is(err, orders.ErrOutcomeUnknown) || !errors.As(err, &dep) || dep.Dependency != orders.DependencyDatabase {
		t.Fatalf("%s: %v, want orders.ErrOutcomeUnknown from the database", what, err)
	}
}

// awaitFired waits for the proxy to have done its fault.
func awaitFired(t *testing.T, fired <-chan struct{}) {
	t.Helper()
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy saw no COMMIT")
	}
}

// A COMMIT whose answer is lost is ErrOutcomeUnknown whether it committed or
// not, and the idempotency record, written in the same transaction, tells the
// two apart on a fresh connection.
func TestCommitAnswerLost(t *testing.T) {
	ctx := context.Background()
	s, direct, proxy := proxiedStores(t)
	mustRestock(t, direct, "A-1", 5, 1)
	placement := func(id, key string) orders.Batch {
		return orders.Batch{Placed: []orders.Placement{{Order: order(id, orders.Item{SKU: "A-1", Quantity: 2}), Key: key, Hash: "h-" + key}}}
	}

	t.Run("committed, answer lost", func(t *testing.T) {
		fired := proxy.Arm(testenv.CommitAnswerLost)
		_, err := s.Commit(ctx, placement("lost-1", "k-lost-1"), nil)
		awaitFired(t, fired)
		wantUnknown(t, "the order", err)
		if !strings.Contains(err.Error(), "commit") {
			t.Errorf("the error does not name the step: %v", err)
		}
		if o, err := direct.Order(ctx, "lost-1"); err != nil || o.Status != orders.StatusPlaced {
			t.Fatalf("read directly: %+v, %v; want the order placed", o, err)
		}
		recs, err := s.Outcomes(ctx, []string{"k-lost-1"}) // a fresh connection through the proxy
		if err != nil || recs["k-lost-1"].Outcome.OrderID != "lost-1" {
			t.Fatalf("the key's record: %+v, %v; want the order", recs, err)
		}
		// A retry that commits again is refused on the key: the service replays it.
		if _, err := s.Commit(ctx, placement("lost-1b", "k-lost-1"), nil); !errors.Is(err, orders.ErrIdempotencyConflict) {
			t.Fatalf("retry: %v, want the key's conflict", err)
		}
		wantStock(t, direct, orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5})
	})

	t.Run("not sent, answer lost", func(t *testing.T) {
		fired := proxy.Arm(testenv.CommitNotSent)
		_, err := s.Commit(ctx, placement("lost-2", "k-lost-2"), nil)
		awaitFired(t, fired)
		wantUnknown(t, "the order", err)
		if _, err := direct.Order(ctx, "lost-2"); !errors.Is(err, orders.ErrNotFound) {
			t.Fatalf("read directly: %v; want no order", err)
		}
		if recs, err := s.Outcomes(ctx, []string{"k-lost-2"}); err != nil || len(recs) != 0 {
			t.Fatalf("the key's record: %+v, %v; want none", recs, err)
		}
		if _, err := s.Commit(ctx, placement("lost-2", "k-lost-2"), nil); err != nil {
			t.Fatalf("retry: %v", err)
		}
		wantStock(t, direct, orders.Stock{SKU: "A-1", Available: 1, Sold: 4, Stocked: 5})
	})

	t.Run("cancel committed, answer lost", func(t *testing.T) {
		fired := proxy.Arm(testenv.CommitAnswerLost)
		_, _, err := s.Cancel(ctx, "lost-1", nil, time.Now())
		awaitFired(t, fired)
		wantUnknown(t, "the cancel", err)
		if _, _, err := s.Cancel(ctx, "lost-1", nil, time.Now()); !errors.Is(err, orders.ErrAlreadyCancelled) {
			t.Fatalf("retry: %v, want already cancelled (the first was applied)", err)
		}
		wantStock(t, direct, orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5})
	})

	t.Run("failure before the commit is known", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Commit(cctx, placement("lost-3", "k-lost-3"), nil)
		if err == nil || errors.Is(err, orders.ErrOutcomeUnknown) {
			t.Fatalf("a commit never sent: %v, want a known failure", err)
		}
	})

	var commits []string
	for _, q := range proxy.Queries() {
		if strings.EqualFold(q, "commit") {
			commits = append(commits, q)
		}
	}
	if len(commits) == 0 {
		t.Fatalf("no simple-query COMMIT went through the proxy: %q", proxy.Queries())
	}
	t.Logf("what pgx sends for tx.Commit: %q", commits[0])
}

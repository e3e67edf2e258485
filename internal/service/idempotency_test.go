package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/testenv"
)

// failingCommit fails its first n commits as a database that went away would,
// after writing nothing.
type failingCommit struct {
	*gormstore.Store
	mu sync.Mutex
	n  int
}

func (f *failingCommit) Commit(ctx context.Context, b orders.Batch, fences orders.Fences) (map[string]int64, error) {
	f.mu.Lock()
	fail := f.n > 0
	f.n--
	f.mu.Unlock()
	if fail {
		return nil, orders.ErrUnavailable
	}
	return f.Store.Commit(ctx, b, fences)
}

// A request whose commit failed left nothing behind under its key (the record is
// written with the order, never before), so its retry runs anew at once, on every
// strategy: no "still running" after a database crash.
func TestFailedCommitLeavesTheKeyFree(t *testing.T) {
	forEachSafeStrategy(t, func(t *testing.T, kind string, strategy orders.Strategy) {
		w := newWorld(t, kind)
		base := w.replicaOf(t, strategy, nil)
		ctx := context.Background()
		if _, _, err := base.svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		deps := base.deps
		deps.Store = &failingCommit{Store: base.store, n: 1}
		svc := service.New(service.Config{Strategy: strategy}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
		req := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 2}}, IdempotencyKey: "crash-1"}
		if _, err := svc.Place(ctx, req); !errors.Is(err, orders.ErrUnavailable) {
			t.Fatalf("first attempt: %v, want ErrUnavailable", err)
		}
		p, err := svc.Place(ctx, req)
		if err != nil || p.Replayed {
			t.Fatalf("the retry: %+v %v; want a new order at once", p, err)
		}
		again, err := base.svc.Place(ctx, req)
		if err != nil || !again.Replayed || again.Order.ID != p.Order.ID {
			t.Fatalf("a second retry: %+v %v; want a replay of %s", again, err, p.Order.ID)
		}
		if st, _ := base.svc.Stock(ctx, "A"); st.Sold != 2 {
			t.Fatalf("sold %d, want 2", st.Sold)
		}
	})
}

// A key's record is kept for the retention: a repeat within it is a replay,
// after it a new order; and the purge deletes what is past it.
func TestIdempotencyRecordsExpireAfterTheRetention(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, kind string) {
		w := newWorld(t, kind)
		base := w.replica(t, nil)
		ctx := context.Background()
		if _, _, err := base.svc.Restock(ctx, "A", 5); err != nil {
			t.Fatal(err)
		}
		clk := testenv.NewClock(time.Now())
		store := gormstore.New(base.store.DB(), clk.Now, 10*time.Second)
		deps := base.deps
		deps.Store = store
		svc := service.New(service.Config{Retention: time.Hour}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), clk.Now)
		req := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "kept"}
		first, err := svc.Place(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		other := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "purged"}
		if _, err := svc.Place(ctx, other); err != nil {
			t.Fatal(err)
		}
		clk.Add(59 * time.Minute)
		if p, err := svc.Place(ctx, req); err != nil || !p.Replayed || p.Order.ID != first.Order.ID {
			t.Fatalf("within the retention: %+v %v; want a replay", p, err)
		}
		clk.Add(2 * time.Minute)
		p, err := svc.Place(ctx, req)
		if err != nil || p.Replayed || p.Order.ID == first.Order.ID {
			t.Fatalf("after the retention: %+v %v; want a new order", p, err)
		}
		n, err := svc.Purge(ctx, orders.Leader{})
		if err != nil || n != 1 {
			t.Fatalf("purged %d (%v); want 1 (the other key's record)", n, err)
		}
		recs, err := store.Outcomes(ctx, []string{"kept", "purged"})
		if err != nil || len(recs) != 1 || recs["kept"].Outcome.OrderID != p.Order.ID {
			t.Fatalf("records after the purge: %+v %v", recs, err)
		}
		if st, _ := base.svc.Stock(ctx, "A"); st.Sold != 3 {
			t.Fatalf("sold %d, want 3", st.Sold)
		}
	})
}

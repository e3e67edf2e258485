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
)

// A replica's queue for one SKU set is bounded: with the lock held elsewhere,
// the orders past --max-queue are answered at once, 503 overloaded, and those
// queued are served once the lock comes.
func TestLockBatchShedsWhatItCannotQueue(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	base := w.replicaOf(t, orders.StrategyLockBatch, nil)
	if _, err := base.svc.Restock(ctx, "A", 10); err != nil {
		t.Fatal(err)
	}
	open := make(chan struct{})
	deps := base.deps
	deps.Locker = gateLocker{open: open, inner: w.locker(t)}
	svc := service.New(service.Config{Strategy: orders.StrategyLockBatch, MaxQueue: 2}, deps,
		slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	full := make(chan struct{})
	service.OnQueued(svc, func(n int) {
		if n == 2 {
			close(full)
		}
	})
	one := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}}
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := svc.Place(ctx, one)
			errs <- err
		})
	}
	<-full
	if _, err := svc.Place(ctx, one); !errors.Is(err, orders.ErrOverloaded) {
		t.Fatalf("the third order: %v, want ErrOverloaded at once", err)
	}
	close(open)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a queued order: %v", err)
		}
	}
	if st, _ := base.svc.Stock(ctx, "A"); st.Sold != 2 {
		t.Fatalf("sold %d, want 2", st.Sold)
	}
}

// panicCommit panics in its first commit.
type panicCommit struct {
	*gormstore.Store
	once sync.Once
}

func (p *panicCommit) Commit(ctx context.Context, b orders.Batch, f orders.Fences) (map[string]int64, error) {
	p.once.Do(func() { panic("a bug in the commit") })
	return p.Store.Commit(ctx, b, f)
}

// A panic inside a batch answers its order with an error instead of taking the
// replica down or leaving the caller waiting, the lock is released, and the next
// order is served.
func TestLockBatchAnswersAPanic(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	base := w.replicaOf(t, orders.StrategyLockBatch, nil)
	if _, err := base.svc.Restock(ctx, "A", 10); err != nil {
		t.Fatal(err)
	}
	deps := base.deps
	deps.Store = &panicCommit{Store: base.store}
	svc := service.New(service.Config{Strategy: orders.StrategyLockBatch}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	one := orders.PlaceRequest{Items: []orders.Item{{SKU: "A", Quantity: 1}}, IdempotencyKey: "p1"}
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := svc.Place(deadline, one); err == nil {
		t.Fatal("the order whose batch panicked was answered as placed")
	}
	p, err := svc.Place(deadline, one)
	if err != nil || p.Replayed {
		t.Fatalf("the retry: %+v %v; want a new order (the panicked batch wrote nothing)", p, err)
	}
	if st, _ := base.svc.Stock(ctx, "A"); st.Sold != 1 {
		t.Fatalf("sold %d, want 1", st.Sold)
	}
}

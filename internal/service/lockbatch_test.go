package service_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
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
	if _, _, err := base.svc.Restock(ctx, "A", 10); err != nil {
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
	if _, _, err := base.svc.Restock(ctx, "A", 10); err != nil {
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

// placeInOrder places each request in its own goroutine, the next one only once
// the one before has joined the replica's lock-batch queue (queued receives the
// queue's length after each), so that the queue holds them in this order. It
// returns the answers' channels, in the same order.
func placeInOrder(t *testing.T, svc *service.Service, queued <-chan int, reqs []orders.PlaceRequest) []chan placeAnswer {
	t.Helper()
	return placeInOrderAfter(t, svc, queued, 0, reqs)
}

// placeInOrderAfter is placeInOrder on a queue that holds ahead orders already.
func placeInOrderAfter(t *testing.T, svc *service.Service, queued <-chan int, ahead int, reqs []orders.PlaceRequest) []chan placeAnswer {
	t.Helper()
	chs := make([]chan placeAnswer, len(reqs))
	calls := make([]func() error, len(reqs))
	for i, req := range reqs {
		chs[i] = make(chan placeAnswer, 1)
		calls[i] = func() error {
			p, err := svc.Place(context.Background(), req)
			chs[i] <- placeAnswer{p, err}
			return err
		}
	}
	inOrder(t, queued, ahead, calls)
	return chs
}

type placeAnswer struct {
	placed orders.Placed
	err    error
}

func items(kv ...any) []orders.Item {
	var out []orders.Item
	for i := 0; i < len(kv); i += 2 {
		out = append(out, orders.Item{SKU: kv[i].(string), Quantity: kv[i+1].(int)})
	}
	return out
}

// Orders for different SKU sets that queue on a replica while its batch runs
// are the next batch: decided in arrival order against the stock the ones
// before left, whatever SKUs they share, committed in one transaction under one
// token per SKU, each answered on its own (placed, short, a replay, a key reused
// with other items), and the cache left equal to the database.
func TestLockBatchServesMixedSKUSetsInOneTransaction(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	for sku, n := range map[string]int64{"A": 3, "B": 2, "C": 5, "Z": 1} {
		if _, _, err := admin.svc.Restock(ctx, sku, n); err != nil {
			t.Fatal(err)
		}
	}
	open := make(chan struct{})
	wanted := make(chan []string, 4)
	r := w.replicaOf(t, orders.StrategyLockBatch, tellingGate{open: open, wanted: wanted, inner: w.locker(t)})
	queued := make(chan int, 16)
	service.OnQueued(r.svc, func(n int) { queued <- n })
	// The first order's batch locks Z, and waits at the gate while the others
	// queue: they are the next batch.
	blocked := placeInOrder(t, r.svc, queued, []orders.PlaceRequest{{Items: items("Z", 1)}})
	if got := <-wanted; !slices.Equal(got, []string{"Z"}) {
		t.Fatalf("the first batch locked %v; want [Z]", got)
	}
	reqs := []orders.PlaceRequest{
		{Items: items("A", 1), IdempotencyKey: "k1"},         // placed: A 2 left
		{Items: items("A", 1, "B", 1), IdempotencyKey: "k2"}, // placed: A 1, B 1 left
		{Items: items("B", 1, "C", 2), IdempotencyKey: "k3"}, // placed: B 0, C 3 left
		{Items: items("A", 2), IdempotencyKey: "k4"},         // short of A
		{Items: items("B", 1)},                               // short of B, no key
		{Items: items("C", 3), IdempotencyKey: "k3"},         // k3 with other items
		{Items: items("A", 1, "C", 3), IdempotencyKey: "k7"}, // placed: A 0, C 0 left
		{Items: items("A", 1), IdempotencyKey: "k1"},         // k1 again: its replay
	}
	chs := placeInOrderAfter(t, r.svc, queued, 1, reqs)
	close(open)
	if got := <-wanted; !slices.Equal(got, []string{"A", "B", "C"}) {
		t.Fatalf("the second batch locked %v; want [A B C]", got)
	}
	first := <-blocked[0]
	if first.err != nil {
		t.Fatalf("the first order: %v", first.err)
	}
	blocker := first.placed.Order.ID
	got := make([]placeAnswer, len(chs))
	for i, ch := range chs {
		got[i] = <-ch
	}
	for _, i := range []int{0, 1, 2, 6} {
		if got[i].err != nil || got[i].placed.Replayed {
			t.Errorf("order %d: %+v %v; want placed", i, got[i].placed, got[i].err)
		}
	}
	// Each refusal says what the orders before it in the batch left of its SKU.
	for i, want := range map[int]struct {
		sku  string
		left int64
	}{3: {"A", 1}, 4: {"B", 0}} {
		var short *orders.InsufficientStockError
		if !errors.As(got[i].err, &short) || len(short.SKUs) != 1 || short.SKUs[0] != want.sku {
			t.Errorf("order %d: %v; want short of %s", i, got[i].err, want.sku)
		} else if n, ok := short.Available[want.sku]; !ok || n != want.left {
			t.Errorf("order %d: available %v; want %s: %d", i, short.Available, want.sku, want.left)
		}
	}
	if !errors.Is(got[5].err, orders.ErrIdempotencyMismatch) {
		t.Errorf("k3 reused with other items: %v; want a mismatch", got[5].err)
	}
	if got[7].err != nil || !got[7].placed.Replayed || got[7].placed.Order.ID != got[0].placed.Order.ID {
		t.Errorf("k1 repeated: %+v %v; want the replay of %s", got[7].placed, got[7].err, got[0].placed.Order.ID)
	}

	db := r.store.DB()
	for sku, want := range map[string]int64{"A": 3, "B": 2, "C": 5} {
		if st, err := r.svc.Stock(ctx, sku); err != nil || st.Sold != want || st.Available != 0 {
			t.Errorf("%s: %+v %v; want %d sold, none left", sku, st, err, want)
		}
		fences := ledgerFences(t, w.dbURL, sku)
		var sales []int64
		db.Raw("SELECT fence FROM stock_ledger WHERE sku = ? AND kind = 'sale'", sku).Scan(&sales)
		if len(sales) == 0 || slices.Min(sales) != slices.Max(sales) || slices.Max(sales) != slices.Max(fences) {
			t.Errorf("%s: sales under fences %v; want one token, the SKU's last", sku, sales)
		}
	}
	var records int64
	db.Raw("SELECT COUNT(*) FROM idempotency_records").Scan(&records)
	if records != 5 { // k1, k2, k3 and k7 placed, k4 refused; no record for the mismatch or the replay
		t.Errorf("%d idempotency records; want 5 (k1, k2, k3, k4, k7)", records)
	}
	if db.Name() == "postgres" {
		var txs int64
		db.Raw("SELECT COUNT(DISTINCT x) FROM (SELECT xmin::text AS x FROM orders WHERE id <> ? UNION ALL SELECT xmin::text FROM idempotency_records) t", blocker).Scan(&txs)
		if txs != 1 {
			t.Errorf("the batch took %d transactions; want 1", txs)
		}
	}
	cached, err := r.cache.Get(ctx, []string{"A", "B", "C"})
	if err != nil {
		t.Fatal(err)
	}
	for sku, n := range cached {
		if n != 0 {
			t.Errorf("I4: the cache says %d of %s; the database none", n, sku)
		}
	}
	audit, err := r.svc.Audit(ctx, true)
	if err != nil || !audit.Consistent {
		t.Errorf("audit %+v %v", audit, err)
	}
}

// tellingGate is gateLocker that tells wanted which SKUs each caller asked for.
type tellingGate struct {
	open   <-chan struct{}
	wanted chan<- []string
	inner  orders.Locker
}

func (g tellingGate) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	g.wanted <- slices.Clone(skus)
	return gateLocker{open: g.open, inner: g.inner}.WithLocks(ctx, skus, fn)
}

// A leader locks the SKUs of the orders it saw when it began; of those
// that arrive while it waits for them, it takes the ones it covers, and leaves
// the others, in order, to the next batch, which serves them.
func TestLockBatchLeavesWhatItDoesNotCoverToTheNextBatch(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	for _, sku := range []string{"A", "B"} {
		if _, _, err := admin.svc.Restock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	open := make(chan struct{})
	wanted := make(chan []string, 4)
	r := w.replicaOf(t, orders.StrategyLockBatch, tellingGate{open: open, wanted: wanted, inner: w.locker(t)})
	queued := make(chan int, 16)
	service.OnQueued(r.svc, func(n int) { queued <- n })
	first := placeInOrder(t, r.svc, queued, []orders.PlaceRequest{{Items: items("A", 1)}})
	if got := <-wanted; !slices.Equal(got, []string{"A"}) {
		t.Fatalf("the first batch locked %v; want [A]", got)
	}
	// While the leader waits for A: one order it covers, one it does not (the
	// queue held one order, the first, until the leader takes it).
	later := placeInOrderAfter(t, r.svc, queued, 1, []orders.PlaceRequest{{Items: items("A", 2)}, {Items: items("A", 1, "B", 1)}})
	close(open)
	if got := <-wanted; !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("the second batch locked %v; want [A B]", got)
	}
	for i, ch := range append(first, later...) {
		if a := <-ch; a.err != nil {
			t.Errorf("order %d: %v", i, a.err)
		}
	}
	a := ledgerFences(t, w.dbURL, "A")
	if len(a) != 4 || a[1] != a[2] || a[3] <= a[2] { // the restock, the first batch's two sales, the second's
		t.Errorf("A's ledger fences %v; want the first two sales under one token, the third under a later one", a)
	}
	if st, _ := r.svc.Stock(ctx, "A"); st.Sold != 4 {
		t.Errorf("A sold %d, want 4", st.Sold)
	}
}

// inOrder runs each call in its own goroutine, the next one only once the one
// before has joined the replica's lock-batch queue (which holds ahead items
// already), and returns their errors' channels in the same order.
func inOrder(t *testing.T, queued <-chan int, ahead int, calls []func() error) []chan error {
	t.Helper()
	chs := make([]chan error, len(calls))
	for i, call := range calls {
		chs[i] = make(chan error, 1)
		go func() { chs[i] <- call() }()
		select {
		case n := <-queued:
			if n != ahead+i+1 {
				t.Fatalf("queue length %d after call %d joined it; want %d", n, i, ahead+i+1)
			}
		case err := <-chs[i]:
			t.Fatalf("call %d answered (%v) without joining the queue", i, err)
		case <-time.After(time.Minute): // joining is at once; a call that waits elsewhere never joins
			t.Fatalf("call %d did not join the queue", i)
		}
	}
	return chs
}

// Confirms and releases join lock-batch's queue beside orders: a batch of
// them is served under one grant, its endings in one transaction, each decided
// on its own in arrival order: a release of a hold confirmed just before it in
// the batch is refused (410 confirmed) while the others commit.
func TestLockBatchEndsHoldsBesideOrders(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	for _, sku := range []string{"A", "B", "Z"} {
		if _, _, err := admin.svc.Restock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(its ...orders.Item) string {
		h, err := admin.svc.Hold(ctx, orders.HoldRequest{Items: its, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return h.Reservation.ID
	}
	h1, h2, h3 := hold(items("A", 2)...), hold(items("A", 1, "B", 1)...), hold(items("B", 2)...)

	open := make(chan struct{})
	wanted := make(chan []string, 4)
	r := w.replicaOf(t, orders.StrategyLockBatch, tellingGate{open: open, wanted: wanted, inner: w.locker(t)})
	queued := make(chan int, 16)
	service.OnQueued(r.svc, func(n int) { queued <- n })
	blocked := placeInOrder(t, r.svc, queued, []orders.PlaceRequest{{Items: items("Z", 1)}})
	if got := <-wanted; !slices.Equal(got, []string{"Z"}) {
		t.Fatalf("the first batch locked %v; want [Z]", got)
	}
	var c1, c3 orders.Placed
	var rel orders.Held
	chs := inOrder(t, queued, 1, []func() error{
		func() (err error) {
			c1, err = r.svc.Confirm(ctx, orders.ConfirmRequest{ID: h1, IdempotencyKey: "c1"})
			return err
		},
		func() (err error) { rel, err = r.svc.Release(ctx, orders.HoldAction{ID: h2}); return err },
		func() error { _, err := r.svc.Place(ctx, orders.PlaceRequest{Items: items("A", 1)}); return err },
		func() (err error) {
			c3, err = r.svc.Confirm(ctx, orders.ConfirmRequest{ID: h3, Items: items("B", 1)})
			return err
		},
		func() error { _, err := r.svc.Release(ctx, orders.HoldAction{ID: h1}); return err }, // confirmed just before, in this batch
	})
	close(open)
	if got := <-wanted; !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("the second batch locked %v; want [A B]: one grant for the orders and the endings", got)
	}
	if a := <-blocked[0]; a.err != nil {
		t.Fatalf("the first order: %v", a.err)
	}
	errs := make([]error, len(chs))
	for i, ch := range chs {
		errs[i] = <-ch
	}
	for i := range 4 {
		if errs[i] != nil {
			t.Errorf("change %d: %v", i, errs[i])
		}
	}
	if !errors.Is(errs[4], orders.ErrHoldConfirmed) {
		t.Errorf("the release of the hold confirmed before it: %v; want ErrHoldConfirmed", errs[4])
	}
	if c1.Order.ReservationID != h1 || !slices.Equal(c1.Order.Items, items("A", 2)) {
		t.Errorf("confirm of h1: %+v", c1.Order)
	}
	if c3.Order.ReservationID != h3 || !slices.Equal(c3.Order.Items, items("B", 1)) {
		t.Errorf("confirm of one unit of h3: %+v", c3.Order)
	}
	if rel.Reservation.Status != orders.HoldReleased {
		t.Errorf("release of h2: %+v", rel)
	}
	// A: 2 confirmed (h1), 1 sold by the order, h2's 1 back. B: h2's 1 back, h3:
	// 1 confirmed and 1 back.
	for sku, want := range map[string]orders.Stock{"A": {Available: 7, Sold: 3}, "B": {Available: 9, Sold: 1}} {
		st, err := r.svc.Stock(ctx, sku)
		if err != nil || st.Available != want.Available || st.Sold != want.Sold || st.Held != 0 {
			t.Errorf("%s: %+v %v; want %d available, %d sold, none held", sku, st, err, want.Available, want.Sold)
		}
	}
	db := r.store.DB()
	if db.Name() == "postgres" {
		var txs int64
		db.Raw("SELECT COUNT(DISTINCT xmin::text) FROM reservations WHERE id IN ?", []string{h1, h2, h3}).Scan(&txs)
		if txs != 1 {
			t.Errorf("the batch's endings took %d transactions; want 1", txs)
		}
	}
	cached, err := r.cache.Get(ctx, []string{"A", "B"})
	if err != nil {
		t.Fatal(err)
	}
	for sku, n := range map[string]int64{"A": 7, "B": 9} {
		if c, ok := cached[sku]; ok && c != n {
			t.Errorf("I4: the cache says %d of %s; the database %d", c, sku, n)
		}
	}
	audit, err := r.svc.Audit(ctx, true)
	if err != nil || !audit.Consistent {
		t.Errorf("audit %+v %v", audit, err)
	}
}

// holdsReads counts the store's reads of holds for their SKUs, and what each
// asked for.
type holdsReads struct {
	*gormstore.Store
	mu    sync.Mutex
	reads [][]string
}

func (h *holdsReads) Holds(ctx context.Context, ids []string) (map[string]orders.Reservation, error) {
	if len(ids) > 0 {
		h.mu.Lock()
		h.reads = append(h.reads, slices.Clone(ids))
		h.mu.Unlock()
	}
	return h.Store.Holds(ctx, ids)
}

// A batch's leader reads the holds of the confirms and releases it serves in
// one statement, before it locks their SKUs, rather than each request reading
// its own; a hold that does not exist is refused as not found, and the orders
// beside it are served.
func TestLockBatchReadsItsEndingsHoldsOnce(t *testing.T) {
	w := newWorld(t, defaultKind())
	ctx := context.Background()
	admin := w.replicaOf(t, orders.StrategyLock, nil)
	for _, sku := range []string{"A", "Z"} {
		if _, _, err := admin.svc.Restock(ctx, sku, 10); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for range 3 {
		h, err := admin.svc.Hold(ctx, orders.HoldRequest{Items: items("A", 1), TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.Reservation.ID)
	}
	open := make(chan struct{})
	wanted := make(chan []string, 4)
	base := w.replicaOf(t, orders.StrategyLockBatch, nil)
	deps := base.deps
	counted := &holdsReads{Store: base.store}
	deps.Store = counted
	deps.Locker = tellingGate{open: open, wanted: wanted, inner: w.locker(t)}
	svc := service.New(service.Config{Strategy: orders.StrategyLockBatch}, deps, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Now)
	queued := make(chan int, 16)
	service.OnQueued(svc, func(n int) { queued <- n })
	blocked := placeInOrder(t, svc, queued, []orders.PlaceRequest{{Items: items("Z", 1)}})
	<-wanted
	chs := inOrder(t, queued, 1, []func() error{
		func() error {
			_, err := svc.Confirm(ctx, orders.ConfirmRequest{ID: ids[0], IdempotencyKey: "c0"})
			return err
		},
		func() error { _, err := svc.Confirm(ctx, orders.ConfirmRequest{ID: ids[1]}); return err },
		func() error { _, err := svc.Release(ctx, orders.HoldAction{ID: ids[2]}); return err },
		func() error { _, err := svc.Confirm(ctx, orders.ConfirmRequest{ID: "h-none"}); return err },
		func() error { _, err := svc.Place(ctx, orders.PlaceRequest{Items: items("A", 1)}); return err },
	})
	close(open)
	if got := <-wanted; !slices.Equal(got, []string{"A"}) {
		t.Fatalf("the second batch locked %v; want [A]", got)
	}
	if a := <-blocked[0]; a.err != nil {
		t.Fatal(a.err)
	}
	for i, ch := range chs {
		err := <-ch
		if i == 3 {
			if !errors.Is(err, orders.ErrNotFound) {
				t.Errorf("a confirm of a hold that does not exist: %v; want not found", err)
			}
		} else if err != nil {
			t.Errorf("change %d: %v", i, err)
		}
	}
	// Alone in its batch, it has no SKU to lock: refused the same.
	if _, err := svc.Release(ctx, orders.HoldAction{ID: "h-none"}); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("a release of a hold that does not exist, alone: %v; want not found", err)
	}
	counted.mu.Lock()
	defer counted.mu.Unlock()
	if len(counted.reads) != 2 || len(counted.reads[0]) != 4 {
		t.Errorf("the holds were read %v; want the four of the batch together, then the one alone", counted.reads)
	}
	if st, _ := svc.Stock(ctx, "A"); st.Sold != 3 || st.Held != 0 || st.Available != 7 {
		t.Errorf("A: %+v; want 3 sold (two confirmed, one ordered), none held, 7 available", st)
	}
}

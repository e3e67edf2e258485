package batch_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/internal/batch"
)

// The tests drive each lead by hand: a lead announces itself on harness.leads
// (it has "taken its locks" only once the test says so), the test calls its
// take itself and sends back what the lead returns, or has it panic. Nothing
// waits on the clock: every step waits for a channel, and patience is only a
// watchdog that fails a test rather than hang it.

const patience = 15 * time.Second

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// leadCall is one lead, stopped before it took anything. peek and takeIf are
// a Selective lead's (nil for a Lead's); take is takeIf(nil) then.
type leadCall struct {
	ctx    context.Context
	key    string
	take   func() []int
	peek   func() []int
	takeIf func(fit func(int) bool) []int
	ret    chan outcome
}

// outcome is what the test has a lead do: return results and err, or panic.
type outcome struct {
	results []string
	err     error
	panic   any
}

type result struct {
	r   string
	err error
}

type harness struct {
	t       *testing.T
	q       *batch.Queue[int, string]
	leads   chan *leadCall
	queued  chan int      // OnQueue's depths
	shed    chan error    // OnShed's reasons
	batches chan int      // OnBatch's sizes
	gaveUp  chan struct{} // a caller saw its ctx end
	hold    chan struct{} // if set, such a caller waits for it to close
}

// newHarness returns a Queue on a hand-driven lead. When the test ends, it
// checks that no goroutine was left and that every queue was removed.
func newHarness(t *testing.T, cfg batch.Config) *harness {
	t.Helper()
	return newHarnessOf(t, cfg, false)
}

// newSelectiveHarness is newHarness on a hand-driven Selective lead.
func newSelectiveHarness(t *testing.T, cfg batch.Config) *harness {
	t.Helper()
	return newHarnessOf(t, cfg, true)
}

func newHarnessOf(t *testing.T, cfg batch.Config, selective bool) *harness {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	h := &harness{
		t:       t,
		leads:   make(chan *leadCall),
		queued:  make(chan int, 100),
		shed:    make(chan error, 100),
		batches: make(chan int, 100),
		gaveUp:  make(chan struct{}, 100),
	}
	cfg.OnQueue = func(_ string, depth int) { h.queued <- depth }
	cfg.OnShed = func(reason error) { h.shed <- reason }
	cfg.OnBatch = func(size int, _ time.Duration) { h.batches <- size }
	drive := func(l *leadCall) ([]string, error) {
		h.leads <- l
		o := <-l.ret
		if o.panic != nil {
			panic(o.panic)
		}
		return o.results, o.err
	}
	if selective {
		h.q = batch.NewSelective(cfg, func(ctx context.Context, key string, peek func() []int, take func(func(int) bool) []int) ([]string, error) {
			return drive(&leadCall{ctx: ctx, key: key, take: func() []int { return take(nil) }, peek: peek, takeIf: take, ret: make(chan outcome)})
		})
	} else {
		h.q = batch.New(cfg, func(ctx context.Context, key string, take func() []int) ([]string, error) {
			return drive(&leadCall{ctx: ctx, key: key, take: take, ret: make(chan outcome)})
		})
	}
	batch.OnGaveUp(h.q, func() {
		h.gaveUp <- struct{}{}
		if h.hold != nil {
			<-h.hold
		}
	})
	t.Cleanup(func() {
		settle(t, ignore) // a leader that started a lead nobody drove is left blocked here
		if n := batch.Keys(h.q); n != 0 {
			t.Errorf("%d queues left after their leaders ended", n)
		}
	})
	return h
}

// settle fails t if goroutines started since ignore do not end within patience.
func settle(t *testing.T, ignore goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		err := goleak.Find(ignore) // retries for a while itself
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("goroutines left: %v", err)
			return
		}
	}
}

// enqueue calls Do(ctx, key, item) in a goroutine and returns once the item is
// queued, with its result's channel and the queue's depth then.
func (h *harness) enqueue(ctx context.Context, key string, item int) (<-chan result, int) {
	h.t.Helper()
	ch := make(chan result, 1)
	go func() {
		r, err := h.q.Do(ctx, key, item)
		ch <- result{r, err}
	}()
	select {
	case depth := <-h.queued:
		return ch, depth
	case r := <-ch:
		h.t.Fatalf("Do(%d) returned %q, %v without queueing", item, r.r, r.err)
	case <-time.After(patience):
		h.t.Fatalf("Do(%d) neither queued nor returned", item)
	}
	return nil, 0
}

// enqueueAll queues items under key, in order.
func (h *harness) enqueueAll(key string, items ...int) []<-chan result {
	h.t.Helper()
	var chs []<-chan result
	for _, it := range items {
		ch, _ := h.enqueue(context.Background(), key, it)
		chs = append(chs, ch)
	}
	return chs
}

// doNow calls Do(ctx, key, item), which must return at once (shed): a Do that
// queued instead fails the test rather than hang it.
func (h *harness) doNow(ctx context.Context, key string, item int) error {
	h.t.Helper()
	ch := make(chan result, 1)
	go func() {
		r, err := h.q.Do(ctx, key, item)
		ch <- result{r, err}
	}()
	select {
	case r := <-ch:
		return r.err
	case depth := <-h.queued:
		h.t.Fatalf("Do(%d) queued (depth %d), want it shed", item, depth)
	case <-time.After(patience):
		h.t.Fatalf("Do(%d) did not return", item)
	}
	return nil
}

func recv[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(patience):
		t.Fatalf("no %s within %v", what, patience)
		panic("unreachable")
	}
}

func answerFor(item int) string { return "r" + strconv.Itoa(item) }

// serve has l take its items and answer each with answerFor; it returns them.
func serve(l *leadCall) []int {
	items := l.take()
	res := make([]string, len(items))
	for i, it := range items {
		res[i] = answerFor(it)
	}
	l.ret <- outcome{results: res}
	return items
}

func wantItems(t *testing.T, got []int, want ...int) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("lead took %v, want %v", got, want)
	}
}

func wantAnswer(t *testing.T, ch <-chan result, item int) {
	t.Helper()
	r := recv(t, ch, "answer")
	if r.err != nil || r.r != answerFor(item) {
		t.Fatalf("item %d answered %q, %v; want %q", item, r.r, r.err, answerFor(item))
	}
}

func wantErr(t *testing.T, ch <-chan result, item int, targets ...error) error {
	t.Helper()
	r := recv(t, ch, "answer")
	for _, target := range targets {
		if !errors.Is(r.err, target) {
			t.Fatalf("item %d answered %q, %v; want an error wrapping %v", item, r.r, r.err, target)
		}
	}
	return r.err
}

func wantBatches(t *testing.T, h *harness, sizes ...int) {
	t.Helper()
	var got []int
	for range sizes {
		got = append(got, recv(t, h.batches, "OnBatch"))
	}
	if !slices.Equal(got, sizes) {
		t.Fatalf("OnBatch sizes %v, want %v", got, sizes)
	}
}

// While a lead waits for its locks, the items that arrive join its batch: one
// lead serves them all, and each caller gets its own answer.
func TestBatchesWhileLeadIsBlocked(t *testing.T) {
	h := newHarness(t, batch.Config{})
	first, depth := h.enqueue(context.Background(), "k", 1)
	if depth != 1 {
		t.Fatalf("depth %d after the first item, want 1", depth)
	}
	l := recv(t, h.leads, "lead")
	if l.key != "k" {
		t.Fatalf("lead for key %q, want k", l.key)
	}
	chs := []<-chan result{first}
	for i := 2; i <= 5; i++ {
		ch, depth := h.enqueue(context.Background(), "k", i)
		if depth != i {
			t.Fatalf("depth %d after item %d, want %d", depth, i, i)
		}
		chs = append(chs, ch)
	}
	wantItems(t, serve(l), 1, 2, 3, 4, 5)
	for i, ch := range chs {
		wantAnswer(t, ch, i+1)
	}
	wantBatches(t, h, 5)
}

// take returns the items in the order they arrived, and each answer goes to
// the caller of the item at the same index.
func TestArrivalOrder(t *testing.T) {
	h := newHarness(t, batch.Config{})
	order := []int{50, 30, 90, 10, 70, 20}
	first, _ := h.enqueue(context.Background(), "k", order[0])
	l := recv(t, h.leads, "lead")
	chs := append([]<-chan result{first}, h.enqueueAll("k", order[1:]...)...)
	wantItems(t, serve(l), order...)
	for i, ch := range chs {
		wantAnswer(t, ch, order[i])
	}
	wantBatches(t, h, len(order))
}

// A lead takes at most MaxBatch items; the leader leads again while items are
// queued, those that came during a lead included, then ends.
func TestMaxBatchAndLeadingAgain(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 2})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3, 4, 5)...)
	items := l1.take()
	wantItems(t, items, 1, 2)
	chs = append(chs, h.enqueueAll("k", 6)...) // arrives while lead 1 serves
	l1.ret <- outcome{results: []string{answerFor(1), answerFor(2)}}
	wantItems(t, serve(recv(t, h.leads, "lead 2")), 3, 4)
	wantItems(t, serve(recv(t, h.leads, "lead 3")), 5, 6)
	for i, ch := range chs {
		wantAnswer(t, ch, i+1)
	}
	wantBatches(t, h, 2, 2, 2)
	// No lead 4: it would be left blocked, and the cleanup's check would fail.
}

// Each key has its own queue and leader: a key whose lead waits does not hold
// another's.
func TestKeysAreIndependent(t *testing.T) {
	h := newHarness(t, batch.Config{})
	a, _ := h.enqueue(context.Background(), "a", 1)
	la := recv(t, h.leads, "lead of a")
	b, depth := h.enqueue(context.Background(), "b", 2)
	if depth != 1 {
		t.Fatalf("b's depth %d, want 1: it joined a's queue", depth)
	}
	lb := recv(t, h.leads, "lead of b")
	if la.key != "a" || lb.key != "b" {
		t.Fatalf("leads for %q and %q, want a and b", la.key, lb.key)
	}
	wantItems(t, serve(lb), 2)
	wantAnswer(t, b, 2)
	wantItems(t, serve(la), 1)
	wantAnswer(t, a, 1)
}

// A lead's context ends after the Queue's Timeout.
func TestLeadContextHasTimeout(t *testing.T) {
	const timeout = time.Minute
	h := newHarness(t, batch.Config{Timeout: timeout})
	before := time.Now()
	ch, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	dl, ok := l.ctx.Deadline()
	if !ok || dl.Before(before) || dl.After(time.Now().Add(timeout)) {
		t.Errorf("lead's deadline %v (set: %v), want within %v of its start", dl, ok, timeout)
	}
	serve(l)
	wantAnswer(t, ch, 1)
}

// A caller whose ctx ends before its item was taken leaves at once with the
// ctx's cause, frees its place in the queue, and its item is never served.
func TestCancelledBeforeTakenLeaves(t *testing.T) {
	h := newHarness(t, batch.Config{MaxQueue: 3})
	c1, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	defer cancel2(nil)
	c2, _ := h.enqueue(ctx2, "k", 2)
	c3, depth := h.enqueue(context.Background(), "k", 3)
	if depth != 3 {
		t.Fatalf("depth %d, want 3", depth)
	}
	errGone := errors.New("client went away")
	cancel2(errGone)
	_ = wantErr(t, c2, 2, errGone)
	// The queue is full (MaxQueue 3) only if item 2 still held its place.
	c4, depth := h.enqueue(context.Background(), "k", 4)
	if depth != 3 {
		t.Fatalf("depth %d after item 2 left and 4 came, want 3", depth)
	}
	wantItems(t, serve(l), 1, 3, 4)
	wantAnswer(t, c1, 1)
	wantAnswer(t, c3, 3)
	wantAnswer(t, c4, 4)
}

// A caller whose ctx ended is not taken even if the lead's take comes before
// the caller got round to leaving: it is never served, and leaves.
func TestEndedButNotYetLeftIsNotTaken(t *testing.T) {
	h := newHarness(t, batch.Config{})
	h.hold = make(chan struct{})
	c1, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	ctx, cancel := context.WithCancel(context.Background())
	c2, _ := h.enqueue(ctx, "k", 2)
	c3, _ := h.enqueue(context.Background(), "k", 3)
	cancel()
	_ = recv(t, h.gaveUp, "caller seeing its ctx end") // and held there, still queued
	wantItems(t, serve(l), 1, 3)
	close(h.hold)
	_ = wantErr(t, c2, 2, context.Canceled)
	wantAnswer(t, c1, 1)
	wantAnswer(t, c3, 3)
}

// A ctx that ended before Do is not queued and starts no lead (the cleanup
// would find it blocked).
func TestEndedContextIsNotQueued(t *testing.T) {
	h := newHarness(t, batch.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.q.Do(ctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do on an ended ctx: %v, want context.Canceled", err)
	}
}

// Once taken, an item's caller waits for its answer even if its ctx ends: the
// lead may be committing it.
func TestTakenThenCancelledWaitsForItsAnswer(t *testing.T) {
	h := newHarness(t, batch.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, _ := h.enqueue(ctx, "k", 1)
	l := recv(t, h.leads, "lead")
	wantItems(t, l.take(), 1)
	cancel()
	_ = recv(t, h.gaveUp, "caller seeing its ctx end") // it saw the end, and must still wait
	select {
	case r := <-ch:
		t.Fatalf("caller returned %q, %v before its lead answered", r.r, r.err)
	default:
	}
	l.ret <- outcome{results: []string{answerFor(1)}}
	wantAnswer(t, ch, 1)
}

// If the lead fails before take (its locks were not had), every item queued
// then gets its error, beyond MaxBatch too: they all waited that long. No lead
// follows, as none is queued.
func TestErrorBeforeTakeAnswersEveryoneQueued(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 2})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3, 4, 5)...)
	errLocks := errors.New("locks not had")
	l.ret <- outcome{err: errLocks}
	for i, ch := range chs {
		_ = wantErr(t, ch, i+1, errLocks)
	}
	select {
	case n := <-h.batches:
		t.Fatalf("OnBatch(%d) for a lead that never took", n)
	default:
	}
}

// An error after take answers the taken items only; the others get the next
// lead.
func TestErrorAfterTake(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 2})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3)...)
	wantItems(t, l1.take(), 1, 2)
	errCommit := errors.New("commit failed")
	l1.ret <- outcome{err: errCommit}
	_ = wantErr(t, chs[0], 1, errCommit)
	_ = wantErr(t, chs[1], 2, errCommit)
	wantItems(t, serve(recv(t, h.leads, "lead 2")), 3)
	wantAnswer(t, chs[2], 3)
	wantBatches(t, h, 2, 1)
}

// Results not aligned with the items taken are a bug in the lead: the taken
// items are told so, rather than get someone else's answer or none.
func TestWrongResultCount(t *testing.T) {
	h := newHarness(t, batch.Config{})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2)...)
	wantItems(t, l.take(), 1, 2)
	l.ret <- outcome{results: []string{answerFor(1)}}
	for i, ch := range chs {
		if err := wantErr(t, ch, i+1, batch.ErrBadLead); !strings.Contains(err.Error(), "1 results for 2 items") {
			t.Errorf("error %q does not say what was wrong", err)
		}
	}
}

// A lead that returns no error without calling take is a bug too: everyone
// waiting is told, rather than led again for ever.
func TestLeadWithoutTakeOrError(t *testing.T) {
	h := newHarness(t, batch.Config{})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2)...)
	l.ret <- outcome{}
	for i, ch := range chs {
		_ = wantErr(t, ch, i+1, batch.ErrBadLead)
	}
}

// syncBuffer is a log's destination, written by a leader, read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A panic before take answers every item waiting (nothing was taken), wrapping
// the panic's error, and is logged. The leader ends; the next Do starts a new
// one, which serves it.
func TestPanicBeforeTake(t *testing.T) {
	var log syncBuffer
	h := newHarness(t, batch.Config{MaxBatch: 2, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l := recv(t, h.leads, "lead")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3)...)
	errBoom := errors.New("boom")
	l.ret <- outcome{panic: errBoom}
	for i, ch := range chs {
		_ = wantErr(t, ch, i+1, batch.ErrPanicked, errBoom)
	}
	if s := log.String(); !strings.Contains(s, "lead panicked") || !strings.Contains(s, "boom") {
		t.Errorf("log %q does not tell of the panic", s)
	}
	next, _ := h.enqueue(context.Background(), "k", 4)
	wantItems(t, serve(recv(t, h.leads, "new lead")), 4)
	wantAnswer(t, next, 4)
}

// A panic after take answers the taken items with its value; those still
// queued get a new leader at once (a caller without a deadline would otherwise
// wait for the next Do), and later Do calls are served.
func TestPanicAfterTake(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 2}) // no Logger: nil-safe
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3)...)
	wantItems(t, l1.take(), 1, 2)
	l1.ret <- outcome{panic: "kaboom"}
	for i := range 2 {
		if err := wantErr(t, chs[i], i+1, batch.ErrPanicked); !strings.Contains(err.Error(), "kaboom") {
			t.Errorf("error %q does not carry the panic's value", err)
		}
	}
	wantItems(t, serve(recv(t, h.leads, "lead 2")), 3)
	wantAnswer(t, chs[2], 3)
	next, _ := h.enqueue(context.Background(), "k", 4)
	wantItems(t, serve(recv(t, h.leads, "lead 3")), 4)
	wantAnswer(t, next, 4)
	wantBatches(t, h, 1, 1) // the panicked lead reports no batch
}

// A key's queue holds MaxQueue waiting items: the next Do is shed at once with
// ErrFull, and a place frees up once a lead takes its batch.
func TestFullQueueSheds(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 2, MaxQueue: 3})
	first, _ := h.enqueue(context.Background(), "k", 1)
	l1 := recv(t, h.leads, "lead 1")
	chs := append([]<-chan result{first}, h.enqueueAll("k", 2, 3)...) // not shed before MaxQueue+1
	wantFull := func(item int) {
		t.Helper()
		err := h.doNow(context.Background(), "k", item)
		var shed *batch.ShedError
		if !errors.Is(err, batch.ErrFull) || !errors.As(err, &shed) {
			t.Fatalf("Do(%d) on a full queue: %v, want a *ShedError wrapping ErrFull", item, err)
		}
		if shed.RetryAfter() != 0 {
			t.Errorf("RetryAfter %v before any lead was measured, want 0", shed.RetryAfter())
		}
		if reason := recv(t, h.shed, "OnShed"); !errors.Is(reason, batch.ErrFull) {
			t.Errorf("OnShed(%v), want ErrFull", reason)
		}
	}
	wantFull(4)
	wantItems(t, l1.take(), 1, 2) // 3 waits alone now
	chs = append(chs, h.enqueueAll("k", 5, 6)...)
	wantFull(7)
	l1.ret <- outcome{results: []string{answerFor(1), answerFor(2)}}
	wantItems(t, serve(recv(t, h.leads, "lead 2")), 3, 5)
	wantItems(t, serve(recv(t, h.leads, "lead 3")), 6)
	for i, item := range []int{1, 2, 3, 5, 6} {
		wantAnswer(t, chs[i], item)
	}
}

// MaxQueue defaults to DefaultQueueBatches batches.
func TestDefaultMaxQueue(t *testing.T) {
	h := newHarness(t, batch.Config{MaxBatch: 1})
	first, _ := h.enqueue(context.Background(), "k", 0)
	l := recv(t, h.leads, "lead")
	chs := []<-chan result{first}
	for i := 1; i < batch.DefaultQueueBatches; i++ {
		ch, _ := h.enqueue(context.Background(), "k", i)
		chs = append(chs, ch)
	}
	if err := h.doNow(context.Background(), "k", 99); !errors.Is(err, batch.ErrFull) {
		t.Fatalf("Do with %d items waiting: %v, want ErrFull", batch.DefaultQueueBatches, err)
	}
	_ = recv(t, h.shed, "OnShed")
	serve(l)
	for i := 1; i < batch.DefaultQueueBatches; i++ {
		serve(recv(t, h.leads, "lead"))
	}
	for i, ch := range chs {
		wantAnswer(t, ch, i)
	}
}

// clock is a hand-moved Config.Now. It starts a day ahead of the real clock, so
// that deadlines set from it never pass in the real one during a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().Add(24 * time.Hour)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// within returns a context whose deadline is d ahead of c.
func within(t *testing.T, c *clock, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(context.Background(), c.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}

// An item whose deadline is nearer than its estimated wait is shed at once
// with ErrNoTime, and only it: the one ahead of it, with more time, stays and
// is served, as is one behind with enough. No estimate, no shedding, before any
// lead was measured.
func TestNoTimeShedsOnlyTheItemThatCannotMakeIt(t *testing.T) {
	clk := newClock()
	h := newHarness(t, batch.Config{MaxBatch: 1, Now: clk.Now})

	// Nothing measured: even a 1ns deadline is queued.
	c0, _ := h.enqueue(within(t, clk, time.Nanosecond), "k", 0)
	l0 := recv(t, h.leads, "lead 0")
	clk.Advance(time.Second) // lead 0 takes a second: the average is 1s
	wantItems(t, serve(l0), 0)
	wantAnswer(t, c0, 0)
	wantBatches(t, h, 1)

	a, _ := h.enqueue(within(t, clk, time.Hour), "k", 1)
	la := recv(t, h.leads, "lead of 1") // waiting for its locks, 1 not taken yet

	// Behind 1: the rest of lead 1 (1s) and its own lead (1s) is 2s; 1.5s left.
	err := h.doNow(within(t, clk, 1500*time.Millisecond), "k", 2)
	var shed *batch.ShedError
	if !errors.Is(err, batch.ErrNoTime) || !errors.As(err, &shed) {
		t.Fatalf("Do with 1.5s left for a 2s wait: %v, want a *ShedError wrapping ErrNoTime", err)
	}
	if shed.RetryAfter() != 2*time.Second {
		t.Errorf("RetryAfter %v, want the 2s estimate", shed.RetryAfter())
	}
	if reason := recv(t, h.shed, "OnShed"); !errors.Is(reason, batch.ErrNoTime) {
		t.Errorf("OnShed(%v), want ErrNoTime", reason)
	}
	c, _ := h.enqueue(within(t, clk, 2500*time.Millisecond), "k", 3) // 2s wait, 2.5s left

	// 0.7s into lead 1, an item behind 1 and 3 waits 0.3s + 2 leads = 2.3s: it
	// has 2.4s. Counting lead 1 whole (3s) would have shed it.
	clk.Advance(700 * time.Millisecond)
	d, _ := h.enqueue(within(t, clk, 2400*time.Millisecond), "k", 4)

	// Once lead 1 took its batch, those waiting wait for its rest and then for
	// their own leads: behind 3 and 4, that is 0.3s + 3 leads = 3.3s.
	wantItems(t, la.take(), 1)
	err = h.doNow(within(t, clk, 3*time.Second), "k", 5)
	if !errors.As(err, &shed) || !errors.Is(err, batch.ErrNoTime) || shed.RetryAfter() != 3300*time.Millisecond {
		t.Fatalf("Do with 3s left for a 3.3s wait: %v, want ErrNoTime estimating 3.3s", err)
	}
	_ = recv(t, h.shed, "OnShed")
	la.ret <- outcome{results: []string{answerFor(1)}}
	wantItems(t, serve(recv(t, h.leads, "lead of 3")), 3)
	wantItems(t, serve(recv(t, h.leads, "lead of 4")), 4)
	wantAnswer(t, a, 1)
	wantAnswer(t, c, 3)
	wantAnswer(t, d, 4)
}

// Many callers on a few keys, some giving up, some leads panicking: every Do
// returns, each answer is its own item's, and no goroutine or queue is left.
func TestManyCallersNoLeak(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	const callers, keys = 400, 4
	var leads atomic.Int64
	q := batch.New(batch.Config{MaxBatch: 16, MaxQueue: callers}, func(_ context.Context, _ string, take func() []int) ([]string, error) {
		n := leads.Add(1)
		if n%13 == 0 {
			panic("before take")
		}
		items := take()
		if n%17 == 0 {
			panic("after take")
		}
		res := make([]string, len(items))
		for i, it := range items {
			res[i] = answerFor(it)
		}
		return res, nil
	})
	var wg sync.WaitGroup
	var served, left, panicked atomic.Int64
	for i := range callers {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%5 == 0 {
				go cancel() // gives up at some point, before or after being taken
			}
			r, err := q.Do(ctx, "k"+strconv.Itoa(i%keys), i)
			switch {
			case err == nil && r == answerFor(i):
				served.Add(1)
			case err == nil:
				t.Errorf("item %d answered %q", i, r)
			case errors.Is(err, context.Canceled):
				left.Add(1)
			case errors.Is(err, batch.ErrPanicked):
				panicked.Add(1)
			default:
				t.Errorf("item %d: %v", i, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	recv(t, done, "every Do returning")
	settle(t, ignore)
	if n := batch.Keys(q); n != 0 {
		t.Errorf("%d queues left", n)
	}
	if served.Load() == 0 {
		t.Error("nothing served")
	}
	t.Logf("%d served, %d left, %d answered a panic, in %d leads", served.Load(), left.Load(), panicked.Load(), leads.Load())
}

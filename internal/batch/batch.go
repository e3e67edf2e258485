// Package batch serves, in one batch, the items that queue under one key while
// the work for that key is busy elsewhere.
//
// The first item to find no queue for its key starts a leader (its own
// goroutine, not the caller's: the batch outlives the caller that started it).
// The leader's Lead does what must come first (take a lock, say) and, once
// that is done, takes every item queued by then, up to MaxBatch, serves them
// together and answers each on its own. It leads again while items are queued
// and removes the queue when none are. Waiting for a lock is then paid once per
// batch rather than once per item, which is where the throughput comes from.
//
// A Selective lead chooses its batch: it peeks at the items waiting before it
// does what must come first (the locks of every SKU they name, say), then takes
// those it can serve and leaves the others for the next lead. One queue can then
// serve items of different kinds (orders for different SKU sets) in one batch.
//
// The package knows nothing of what the items are or what serving them means:
// the caller's Lead does. What it adds is the queueing: arrival order, callers
// that give up before their turn, errors and panics answered to the items they
// concern, and shedding at once what would only wait in vain (a full queue, or
// a deadline the queue ahead cannot meet).
package batch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Defaults of a Config's zero fields.
const (
	// DefaultMaxBatch is the most items one lead takes.
	DefaultMaxBatch = 128
	// DefaultQueueBatches is how many full batches a key's queue holds by
	// default: MaxQueue is DefaultQueueBatches*MaxBatch. The last item of a full
	// queue is then served by the fifth lead at worst (four batches queued and
	// the one under way): a few lock round-trips, which a caller can wait for.
	// A longer queue would only hold callers for an answer a retry, on another
	// replica or later, gives sooner, and hold a goroutine and its request each
	// meanwhile. Scaling with MaxBatch keeps that bound in leads when MaxBatch is
	// tuned.
	DefaultQueueBatches = 4
	// DefaultTimeout bounds one lead, the lock wait included.
	DefaultTimeout = 10 * time.Second
)

// ewmaWeight is the weight, 1/ewmaWeight, of a lead's duration in the moving
// average: as TCP's smoothed round-trip time, it follows a change of pace
// within a dozen leads (milliseconds under load) without swinging on one slow
// lead.
const ewmaWeight = 8

var (
	// ErrFull is what Do returns at once when the key's queue already holds
	// MaxQueue waiting items (as a *ShedError). Meant to become a 503 with
	// Retry-After: the item was never queued.
	ErrFull = errors.New("batch: queue full")
	// ErrNoTime is what Do returns at once when its context's deadline is nearer
	// than the estimated wait for its answer (as a *ShedError): the item would
	// only have waited to time out. The item was never queued.
	ErrNoTime = errors.New("batch: not enough time left to wait for a lead")
	// ErrPanicked is what the items of a lead that panicked (or called
	// runtime.Goexit) are answered with, wrapping the panic's value.
	ErrPanicked = errors.New("batch: lead panicked")
	// ErrBadLead is what the items of a lead that broke its contract are
	// answered with: results not aligned with the items taken, or no error and
	// take never called. A bug in the Lead, answered rather than hidden.
	ErrBadLead = errors.New("batch: lead broke its contract")
)

// ShedError is the error of an item Do refused at once, without queueing it.
// errors.Is(err, ErrFull) or errors.Is(err, ErrNoTime) says why.
type ShedError struct {
	// Err is ErrFull or ErrNoTime.
	Err error
	// Wait is the estimated wait the item would have had for its answer: zero
	// when no lead has been measured yet.
	Wait time.Duration
}

// Error says why the item was shed, with the estimate if there is one.
func (e *ShedError) Error() string {
	if e.Wait > 0 {
		return fmt.Sprintf("%v (estimated wait %v)", e.Err, e.Wait)
	}
	return e.Err.Error()
}

// Unwrap returns ErrFull or ErrNoTime.
func (e *ShedError) Unwrap() error { return e.Err }

// RetryAfter is the estimated wait the item would have had, for a Retry-After
// header; zero when there is no estimate yet. For ErrFull, it is about the time
// the queue ahead takes to drain.
func (e *ShedError) RetryAfter() time.Duration { return e.Wait }

// Config tunes a Queue. The zero value is usable: every zero field takes its
// default.
type Config struct {
	// MaxBatch is the most items one lead takes (DefaultMaxBatch if zero).
	MaxBatch int
	// MaxQueue is the most items waiting per key, not counting those a lead has
	// taken; Do on a full queue returns ErrFull at once. Zero means
	// DefaultQueueBatches*MaxBatch (see DefaultQueueBatches for why).
	MaxQueue int
	// Timeout is the deadline of one lead's context, the lock wait included
	// (DefaultTimeout if zero). A taken item's caller waits for its answer past
	// its own deadline, up to this long.
	Timeout time.Duration
	// Now is the clock of the wait estimates (time.Now if nil): how long leads
	// took, and how much time a caller's deadline leaves. The leads' Timeout is
	// a context's, on the real clock.
	Now func() time.Time
	// Logger, if set, gets an error record for each lead that panicked.
	Logger *slog.Logger

	// The hooks below are for metrics; nil ones are skipped. They run on the
	// caller's or the leader's goroutine: they must be quick and must not panic.

	// OnQueue is called after an item joins key's queue, with the number of
	// items now waiting in it.
	OnQueue func(key string, depth int)
	// OnShed is called when Do refuses an item at once, with ErrFull or
	// ErrNoTime.
	OnShed func(reason error)
	// OnBatch is called after each lead that took its batch (its locks were
	// had), once its items are answered: how many it took (zero if every one
	// had left), and how long the lead took from its start, lock wait included.
	OnBatch func(size int, d time.Duration)
}

// Lead serves one batch of key. It does what must come first (takes the locks),
// then calls take once to receive the items queued by then: in arrival order,
// at most MaxBatch, only those whose callers still wait. It returns one result
// per taken item, aligned with them, or an error for all of them.
//
// Calling take again returns the same items; calling it after Lead returned
// returns none. If Lead returns an error without having called take (the locks
// were not had), every item waiting then is answered with it: they all waited
// that long. ctx ends after the Queue's Timeout.
type Lead[T, R any] func(ctx context.Context, key string, take func() []T) ([]R, error)

// Selective is a Lead that chooses its batch. peek returns the items waiting
// (arrival order, at most MaxBatch, only those whose callers still wait)
// without taking them, so that the lead can do what they need first (take the
// locks of what they name). take then takes, in arrival order, at most MaxBatch
// of the items waiting for which fit reports true (every one when fit is nil),
// and leaves the others waiting, in order, for the next lead. fit runs under the
// Queue's mutex: it must be quick, and must not call the Queue.
//
// Everything else is Lead's contract: take's first call decides the batch
// (later calls return the same items, whatever fit they pass), and if the lead
// returns an error without having called take, every item waiting then is
// answered with it.
type Selective[T, R any] func(ctx context.Context, key string, peek func() []T, take func(fit func(T) bool) []T) ([]R, error)

// Queue batches the items of each key for its Lead. Its methods are safe for
// concurrent use.
type Queue[T, R any] struct {
	cfg  Config
	lead Selective[T, R]

	mu     sync.Mutex
	queues map[string]*keyQueue[T, R] // a queue is here while its leader runs
	avg    time.Duration              // moving average of the leads' durations
	leads  int                        // how many leads were measured

	gaveUp func() // tests only: a caller saw its ctx end while waiting
}

// keyQueue is one key's items waiting for a lead, and the lead under way.
type keyQueue[T, R any] struct {
	waiting []*pending[T, R] // arrival order; taken ones and those left are removed
	leading bool             // a lead is under way, started at started
	took    bool             // and it has taken its batch
	started time.Time
}

// pending is one item and its caller.
type pending[T, R any] struct {
	ctx   context.Context
	item  T
	done  chan answer[R] // buffered: a leader never waits for a caller that left
	taken bool           // under Queue.mu: a lead owes it an answer
}

type answer[R any] struct {
	r   R
	err error
}

// New returns a Queue that serves its batches with lead, which must not be nil.
func New[T, R any](cfg Config, lead Lead[T, R]) *Queue[T, R] {
	if lead == nil {
		panic("batch: New with a nil Lead")
	}
	return NewSelective(cfg, func(ctx context.Context, key string, _ func() []T, take func(func(T) bool) []T) ([]R, error) {
		return lead(ctx, key, func() []T { return take(nil) })
	})
}

// NewSelective returns a Queue that serves its batches with lead, which must
// not be nil.
func NewSelective[T, R any](cfg Config, lead Selective[T, R]) *Queue[T, R] {
	if lead == nil {
		panic("batch: NewSelective with a nil Lead")
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultQueueBatches * cfg.MaxBatch
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnQueue == nil {
		cfg.OnQueue = func(string, int) {}
	}
	if cfg.OnShed == nil {
		cfg.OnShed = func(error) {}
	}
	if cfg.OnBatch == nil {
		cfg.OnBatch = func(int, time.Duration) {}
	}
	return &Queue[T, R]{cfg: cfg, lead: lead, queues: map[string]*keyQueue[T, R]{}}
}

// Do queues item under key and waits for its result.
//
// It returns at once a *ShedError wrapping ErrFull if key's queue is full, or
// ErrNoTime if ctx has a deadline nearer than the estimated wait. If ctx ends
// before a lead took the item, Do returns an error wrapping context.Cause(ctx)
// and the item is never served. Once taken, the item's caller waits for its
// answer whatever ctx does: the lead may be committing it, and what it did is
// what the caller must be told. That answer comes within the lead's Timeout, if
// the Lead honours its context.
func (q *Queue[T, R]) Do(ctx context.Context, key string, item T) (R, error) {
	var zero R
	if ctx.Err() != nil {
		return zero, fmt.Errorf("batch: not queued: %w", context.Cause(ctx))
	}
	pd := &pending[T, R]{ctx: ctx, item: item, done: make(chan answer[R], 1)}
	q.mu.Lock()
	kq := q.queues[key]
	if shed := q.admit(ctx, kq); shed != nil {
		q.mu.Unlock()
		q.cfg.OnShed(shed.Err)
		return zero, shed
	}
	start := kq == nil
	if start {
		kq = &keyQueue[T, R]{}
		q.queues[key] = kq
	}
	kq.waiting = append(kq.waiting, pd)
	depth := len(kq.waiting)
	q.mu.Unlock()
	q.cfg.OnQueue(key, depth)
	if start {
		go q.run(key, kq) //nolint:contextcheck // the batch outlives the caller that started it
	}

	select {
	case a := <-pd.done:
		return a.r, a.err
	case <-ctx.Done():
	}
	if q.gaveUp != nil {
		q.gaveUp()
	}
	q.mu.Lock()
	taken := pd.taken
	if !taken { // leave, freeing its place; a lead's take may have dropped it already
		if i := slices.Index(kq.waiting, pd); i >= 0 {
			kq.waiting = slices.Delete(kq.waiting, i, i+1)
		}
	}
	q.mu.Unlock()
	if taken {
		a := <-pd.done
		return a.r, a.err
	}
	return zero, fmt.Errorf("batch: gave up waiting for a lead: %w", context.Cause(ctx))
}

// admit says why an item arriving at kq (nil: no queue yet) is to be shed, if
// it is. Under q.mu.
func (q *Queue[T, R]) admit(ctx context.Context, kq *keyQueue[T, R]) *ShedError {
	pos := 0
	if kq != nil {
		pos = len(kq.waiting)
	}
	if pos >= q.cfg.MaxQueue {
		wait, _ := q.estimate(kq, pos)
		return &ShedError{Err: ErrFull, Wait: wait}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	// Only this item is shed, never the queue: those ahead of it have either
	// more time or an earlier turn.
	if wait, ok := q.estimate(kq, pos); ok && wait > deadline.Sub(q.cfg.Now()) {
		return &ShedError{Err: ErrNoTime, Wait: wait}
	}
	return nil
}

// estimate is how long an item at position pos of kq's waiting items (kq nil:
// a new queue) would wait for its answer: the rest of the lead under way, then
// one moving-average lead per batch up to and including its own. There is no
// estimate before a lead was measured. Under q.mu.
func (q *Queue[T, R]) estimate(kq *keyQueue[T, R], pos int) (time.Duration, bool) {
	if q.leads == 0 {
		return 0, false
	}
	leads := time.Duration(pos/q.cfg.MaxBatch + 1) // ceil((pos+1)/MaxBatch)
	if kq == nil || !kq.leading {
		return leads * q.avg, true
	}
	rest := max(q.avg-q.cfg.Now().Sub(kq.started), 0)
	if !kq.took {
		leads-- // the lead under way will take the first batch of those waiting
	}
	return rest + leads*q.avg, true
}

// run leads kq until it is empty.
func (q *Queue[T, R]) run(key string, kq *keyQueue[T, R]) {
	for q.leadOnce(key, kq) {
	}
}

// round is what one lead took, under Queue.mu.
type round[T, R any] struct {
	taken  []*pending[T, R]
	called bool // take was called
	closed bool // the lead returned: take gives nothing more
}

// leadOnce runs one lead and answers what it took. It reports whether the
// caller should lead again (items are waiting); if not, it removed the queue.
func (q *Queue[T, R]) leadOnce(key string, kq *keyQueue[T, R]) (again bool) {
	ctx, cancel := context.WithTimeout(context.Background(), q.cfg.Timeout)
	defer cancel()
	rd := &round[T, R]{}
	q.mu.Lock()
	start := q.cfg.Now()
	kq.leading, kq.took, kq.started = true, false, start
	q.mu.Unlock()

	returned := false
	defer func() {
		if !returned {
			q.panicked(key, kq, rd, recover())
		}
	}()
	results, err := q.lead(ctx, key, q.peeker(kq, rd), q.taker(kq, rd))
	returned = true

	taken, called := q.closeRound(kq, rd)
	switch {
	case err != nil:
	case !called:
		err = fmt.Errorf("%w: it returned neither an error nor having called take", ErrBadLead)
	case len(results) != len(taken):
		err = fmt.Errorf("%w: %d results for %d items", ErrBadLead, len(results), len(taken))
	}
	var d time.Duration
	if called { // measured before the answers, which may be what a caller waits for to measure
		d = q.measure(start)
	}
	for i, pd := range taken {
		if err != nil {
			pd.done <- answer[R]{err: err}
		} else {
			pd.done <- answer[R]{r: results[i]}
		}
	}
	if called {
		q.cfg.OnBatch(len(taken), d)
	}
	return q.next(key, kq)
}

// peeker is the peek of rd's lead: up to MaxBatch of the items waiting, not
// taken; none once the lead took its batch or returned.
func (q *Queue[T, R]) peeker(kq *keyQueue[T, R], rd *round[T, R]) func() []T {
	return func() []T {
		q.mu.Lock()
		defer q.mu.Unlock()
		if rd.closed || rd.called {
			return nil
		}
		var items []T
		for _, pd := range kq.waiting {
			if len(items) == q.cfg.MaxBatch {
				break
			}
			if pd.ctx.Err() == nil {
				items = append(items, pd.item)
			}
		}
		return items
	}
}

// taker is the take of rd's lead: the first call takes up to MaxBatch items
// that fit, later calls return the same, and none after the lead returned.
func (q *Queue[T, R]) taker(kq *keyQueue[T, R], rd *round[T, R]) func(fit func(T) bool) []T {
	return func(fit func(T) bool) []T {
		q.mu.Lock()
		defer q.mu.Unlock()
		if rd.closed { // a goroutine of the Lead, late: whatever it takes, nobody would answer
			return nil
		}
		if !rd.called {
			rd.called, kq.took = true, true
			rd.taken = q.take(kq, q.cfg.MaxBatch, fit)
		}
		items := make([]T, len(rd.taken))
		for i, pd := range rd.taken {
			items[i] = pd.item
		}
		return items
	}
}

// panicked answers what a lead that panicked (p) or called runtime.Goexit (p
// nil) concerned, rather than take the process down or leave callers waiting
// for ever, and starts a new leader for the items queued since.
func (q *Queue[T, R]) panicked(key string, kq *keyQueue[T, R], rd *round[T, R], p any) {
	err := fmt.Errorf("%w: it called runtime.Goexit", ErrPanicked)
	if e, ok := p.(error); ok {
		err = fmt.Errorf("%w: %w", ErrPanicked, e)
	} else if p != nil {
		err = fmt.Errorf("%w: %v", ErrPanicked, p)
	}
	taken, called := q.closeRound(kq, rd)
	if q.cfg.Logger != nil {
		q.cfg.Logger.Error("batch: a lead panicked", "key", key, "panic", p, "took", called, "answered", len(taken), "stack", string(debug.Stack()))
	}
	for _, pd := range taken {
		pd.done <- answer[R]{err: err}
	}
	// This goroutine ends. Every item the panic concerned is answered (all of
	// those waiting, if it came before take), so a new leader for those that
	// queued since cannot re-panic on the same items for ever; without one, a
	// caller with no deadline would wait until the next Do.
	if q.next(key, kq) {
		go q.run(key, kq) //nolint:contextcheck // as in Do
	}
}

// closeRound ends rd's lead: take gives nothing more. It returns the items the lead
// must answer: those it took, or, if it never called take, every item waiting
// (they all waited that long for nothing).
func (q *Queue[T, R]) closeRound(kq *keyQueue[T, R], rd *round[T, R]) (taken []*pending[T, R], called bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rd.closed = true
	if !rd.called {
		rd.taken = q.take(kq, math.MaxInt, nil)
	}
	return rd.taken, rd.called
}

// take removes from kq the first n items whose callers still wait and that
// fit (every one if fit is nil), and marks them taken; those that do not fit
// stay, in order. Those whose ctx ended on the way are dropped: their callers
// leave on their own. Under q.mu.
func (q *Queue[T, R]) take(kq *keyQueue[T, R], n int, fit func(T) bool) []*pending[T, R] {
	var out []*pending[T, R]
	var kept []*pending[T, R] // a new backing array: not the taken ones'
	i := 0
	for ; i < len(kq.waiting) && len(out) < n; i++ {
		switch pd := kq.waiting[i]; {
		case pd.ctx.Err() != nil:
		case fit == nil || fit(pd.item):
			pd.taken = true
			out = append(out, pd)
		default:
			kept = append(kept, pd)
		}
	}
	kq.waiting = append(kept, kq.waiting[i:]...)
	return out
}

// measure adds the duration of a lead that started at start to the moving
// average, and returns it.
func (q *Queue[T, R]) measure(start time.Time) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := max(q.cfg.Now().Sub(start), 0)
	if q.leads == 0 {
		q.avg = d
	} else {
		q.avg += (d - q.avg) / ewmaWeight
	}
	q.leads++
	return d
}

// next ends kq's lead. It reports whether items wait for another; if none do,
// it removes the queue, and the next Do for key starts a new leader.
func (q *Queue[T, R]) next(key string, kq *keyQueue[T, R]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	kq.leading, kq.took = false, false
	if len(kq.waiting) == 0 {
		delete(q.queues, key)
		return false
	}
	return true
}

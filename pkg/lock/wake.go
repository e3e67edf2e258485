package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// waker listens, on one subscription per Client, for the releases its Backend
// announces and wakes the local callers waiting for those resources, so that a
// release is followed by a retry at once instead of at the next poll. Without a
// Notifier it wakes nobody, and waiters poll.
type waker struct {
	n       Notifier      // nil: the Backend announces nothing
	timeout time.Duration // for the subscribe

	subMu sync.Mutex // one subscribe at a time, outside mu

	// seen counts the releases delivered, so that a caller that tried once
	// before it watched can tell whether one landed meanwhile (see Client.obtain).
	seen atomic.Uint64

	mu       sync.Mutex
	stop     func() error // the subscription's, while there is one
	closed   bool
	done     chan struct{}
	watchers map[string]map[*watch]struct{}
}

// watch delivers a signal on C whenever one of its names is released.
type watch struct {
	C     chan struct{}
	names []string
}

var errClosed = errors.New("lock: client closed")

// watch registers interest in names, and subscribes on first use. Registering
// before trying to obtain means a release that lands between a failed try and the
// wait is not missed. A subscription that cannot be made now is tried again by the
// next waiter; meanwhile waiting falls back to the poll.
func (w *waker) watch(ctx context.Context, names []string) (*watch, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, errClosed
	}
	if w.watchers == nil {
		w.watchers = make(map[string]map[*watch]struct{})
	}
	wt := &watch{C: make(chan struct{}, 1), names: names}
	for _, n := range names {
		set := w.watchers[n]
		if set == nil {
			set = make(map[*watch]struct{})
			w.watchers[n] = set
		}
		set[wt] = struct{}{}
	}
	subscribed := w.stop != nil
	w.mu.Unlock()
	if !subscribed && w.n != nil {
		w.subscribe(ctx)
	}
	return wt, nil
}

// mark is where the release announcements stood before a try made without a
// watch: how many had been delivered, and whether a subscription was up.
type mark struct {
	seen       uint64
	subscribed bool
}

// mark returns where the announcements stand now, or errClosed. It subscribes
// on first use, as watch does, so that a later watch finds the subscription up.
func (w *waker) mark(ctx context.Context) (mark, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return mark{}, errClosed
	}
	subscribed := w.stop != nil
	w.mu.Unlock()
	if !subscribed && w.n != nil {
		w.subscribe(ctx)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return mark{seen: w.seen.Load(), subscribed: w.stop != nil}, nil
}

// missed reports whether a release may have been announced, or gone
// unannounced for want of a subscription, since m: a caller that tried before it
// watched must then try again rather than wait. announced says which.
func (w *waker) missed(m mark) (missed, announced bool) {
	if w.n == nil {
		return false, false
	}
	announced = w.seen.Load() != m.seen
	return announced || !m.subscribed, announced
}

func (w *waker) subscribe(ctx context.Context) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	w.mu.Lock()
	done := w.stop != nil || w.closed
	w.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
	defer cancel()
	names, stop, err := w.n.Subscribe(ctx)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		_ = stop()
		return
	}
	w.stop, w.done = stop, make(chan struct{})
	go w.loop(names, w.done)
}

func (w *waker) unwatch(wt *watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range wt.names {
		delete(w.watchers[n], wt)
		if len(w.watchers[n]) == 0 {
			delete(w.watchers, n)
		}
	}
}

// loop wakes the watchers of each released name until the subscription ends;
// a broken one is forgotten, so that the next waiter subscribes again.
func (w *waker) loop(names <-chan string, done chan struct{}) {
	defer close(done)
	for name := range names {
		w.seen.Add(1)
		w.mu.Lock()
		for wt := range w.watchers[name] {
			select {
			case wt.C <- struct{}{}:
			default: // already signalled
			}
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	if w.done == done && !w.closed {
		stop := w.stop
		w.stop, w.done = nil, nil
		go func() { _ = stop() }()
	}
	w.mu.Unlock()
}

func (w *waker) close() error {
	w.mu.Lock()
	w.closed = true
	stop, done := w.stop, w.done
	w.mu.Unlock()
	if stop == nil {
		return nil
	}
	err := stop()
	<-done
	return err
}

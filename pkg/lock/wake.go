package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// waker listens, on one subscription per Client, for the release announcements of
// its namespace and wakes the local callers waiting for those resources, so that a
// release is followed by a retry at once instead of at the next poll.
type waker struct {
	rdb     redis.UniversalClient
	channel string
	timeout time.Duration // for the first subscribe

	subMu sync.Mutex // one subscribe at a time, outside mu

	mu       sync.Mutex
	ps       *redis.PubSub
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
	subscribed := w.ps != nil
	w.mu.Unlock()
	if !subscribed {
		w.subscribe(ctx)
	}
	return wt, nil
}

func (w *waker) subscribe(ctx context.Context) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	w.mu.Lock()
	done := w.ps != nil || w.closed
	w.mu.Unlock()
	if done {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	ps := w.rdb.Subscribe(ctx, w.channel)
	if _, err := ps.ReceiveTimeout(ctx, w.timeout); err != nil { // the confirmation
		reloadOnFailure(ctx, w.rdb, err)
		_ = ps.Close()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		_ = ps.Close()
		return
	}
	w.ps, w.done = ps, make(chan struct{})
	go w.loop(ps.Channel(), w.done)
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

func (w *waker) loop(msgs <-chan *redis.Message, done chan struct{}) {
	defer close(done)
	for m := range msgs {
		w.mu.Lock()
		for wt := range w.watchers[m.Payload] {
			select {
			case wt.C <- struct{}{}:
			default: // already signalled
			}
		}
		w.mu.Unlock()
	}
}

func (w *waker) close() error {
	w.mu.Lock()
	w.closed = true
	ps, done := w.ps, w.done
	w.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	return err
}

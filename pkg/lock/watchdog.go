package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// watchdog keeps the leases of one grant alive while the caller's function runs.
// It renews each lease every RenewEvery; when a renewal finds the lock gone, or no
// renewal succeeds before the lease would end, it cancels the function's context
// with a cause wrapping ErrLeaseLost. Unlike Redisson's, it neither only logs a
// failed renewal nor outlives the call: stop waits for its goroutine.
type watchdog struct {
	c      *Client
	leases []*lease
	cancel context.CancelCauseFunc
	start  *time.Timer // starts the renewals when the first is due

	mu      sync.Mutex
	stopped bool // after stop, a late expiry must not touch the leases
	lost    bool
	expiry  *time.Timer
	ctx     context.Context // ends renewals in flight when the function returns
	quit    context.CancelFunc
	done    chan struct{} // closed when the renewals have ended; nil until they start
}

// startWatchdog arms the watchdog of a grant. Most functions return long before
// the first renewal is due (RenewEvery, a third of the TTL by default), so
// nothing runs until then: one timer, rather than a goroutine, a context and an
// expiry timer per call, which cost an uncontended acquisition about as much as
// the rest of the Client did. When the timer fires, the renewal loop and the
// expiry are set up as before; a lease that ran out meanwhile (a late timer) is
// lost at once by the expiry.
func (c *Client) startWatchdog(cancel context.CancelCauseFunc, leases []*lease) *watchdog {
	wd := &watchdog{c: c, leases: leases, cancel: cancel}
	wd.start = time.AfterFunc(time.Until(wd.nextDue(nil)), wd.run)
	return wd
}

// run starts the renewals, unless the watchdog was stopped first.
func (wd *watchdog) run() {
	wd.mu.Lock()
	if wd.stopped {
		wd.mu.Unlock()
		return
	}
	wd.ctx, wd.quit = context.WithCancel(context.Background())
	wd.done = make(chan struct{})
	wd.expiry = time.AfterFunc(time.Until(wd.earliestEnd()), func() {
		wd.lose("not renewed before the lease ran out")
	})
	wd.mu.Unlock()
	wd.loop()
}

// stop ends the watchdog and waits for its renewals, if they started. A renewal
// in flight is abandoned through its context (each Backend honours it: Redis's
// with ContextTimeoutEnabled set on the go-redis client). After stop, nothing touches the leases or cancels the
// function. It may be called more than once.
func (wd *watchdog) stop() {
	wd.start.Stop()
	wd.mu.Lock()
	wd.stopped = true // a run not yet started returns at once; a late expiry does nothing
	quit, done := wd.quit, wd.done
	wd.mu.Unlock()
	if quit == nil {
		return
	}
	quit()
	<-done // no renewal can re-arm the expiry after this
	wd.expiry.Stop()
}

// wasLost reports whether the watchdog found a lease lost (and cancelled the
// work).
func (wd *watchdog) wasLost() bool {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	return wd.lost
}

func (wd *watchdog) loop() {
	defer close(wd.done)
	ctx := wd.ctx
	retry := make(map[*lease]time.Time) // leases whose last renewal failed: when to try again
	timer := time.NewTimer(time.Until(wd.nextDue(retry)))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		for _, l := range wd.leases {
			due := wd.due(l, retry)
			if time.Now().Before(due) {
				continue
			}
			switch err := wd.renew(ctx, l); {
			case err == nil:
				delete(retry, l)
				wd.expiry.Reset(time.Until(wd.earliestEnd()))
			case errors.Is(err, ErrNotHeld):
				wd.c.opt.Metrics.Renewal("lost")
				wd.lose("the lock is held by another owner or gone")
				return
			case ctx.Err() != nil:
				return
			default: // the Backend slow or unreachable: try again soon; expiry cancels if it never works
				wd.c.opt.Metrics.Renewal("error")
				retry[l] = time.Now().Add(wd.c.opt.RenewEvery / 8)
			}
		}
		timer.Reset(time.Until(wd.nextDue(retry)))
	}
}

func (wd *watchdog) renew(ctx context.Context, l *lease) error {
	_, validUntil, lost := l.state()
	if lost {
		return ErrNotHeld
	}
	ctx, cancel := context.WithDeadline(ctx, validUntil)
	defer cancel()
	sent := time.Now()
	if err := wd.c.b.Renew(ctx, l.names, l.value, wd.c.opt.TTL); err != nil {
		return err
	}
	l.renewed(sent, wd.c.validity())
	wd.c.opt.Metrics.Renewal("ok")
	return nil
}

func (wd *watchdog) lose(reason string) {
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if wd.stopped || wd.lost {
		return
	}
	wd.lost = true
	for _, l := range wd.leases {
		l.markLost()
	}
	wd.c.opt.Metrics.Lost()
	wd.cancel(fmt.Errorf("%w: %s", ErrLeaseLost, reason))
}

func (wd *watchdog) due(l *lease, retry map[*lease]time.Time) time.Time {
	if t, ok := retry[l]; ok {
		return t
	}
	renewedAt, _, _ := l.state()
	return renewedAt.Add(wd.c.opt.RenewEvery)
}

func (wd *watchdog) nextDue(retry map[*lease]time.Time) time.Time {
	next := wd.due(wd.leases[0], retry)
	for _, l := range wd.leases[1:] {
		if d := wd.due(l, retry); d.Before(next) {
			next = d
		}
	}
	return next
}

func (wd *watchdog) earliestEnd() time.Time { return earliestEnd(wd.leases) }

func earliestEnd(leases []*lease) time.Time {
	_, end, _ := leases[0].state()
	for _, l := range leases[1:] {
		if _, e, _ := l.state(); e.Before(end) {
			end = e
		}
	}
	return end
}

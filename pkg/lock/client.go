package lock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Client takes per-resource locks from a Backend for one process. Create one per
// process and share it: the local queue, the handoff and the release
// subscription only work among callers of the same Client.
type Client struct {
	b    Backend
	opt  Options
	slot slots
	wake waker

	valuePrefix string        // random, per Client: see newValue
	valueSeq    atomic.Uint64 // leases named so far

	// down is set by an attempt the Backend failed and cleared by one it
	// answered (granted or busy); pendingSince is when the calls in flight began
	// to go unanswered (0: none). A caller whose wait for a local slot ends while
	// either says the Backend is not answering was held back by the Backend, not
	// by an owner, and says so (ErrUnavailable): see unreachable.
	down         atomic.Bool
	pendingSince atomic.Int64
}

// calling notes a Backend call begun.
func (c *Client) calling() { c.pendingSince.CompareAndSwap(0, time.Now().UnixNano()) }

// answered notes a Backend call's end: answered (granted, busy) or failed.
func (c *Client) answered(ok bool) {
	c.pendingSince.Store(0)
	c.down.Store(!ok)
}

// unreachable says whether the Backend's last call failed, or its calls have
// gone unanswered for long (stuck).
func (c *Client) unreachable() bool {
	if c.down.Load() {
		return true
	}
	since := c.pendingSince.Load()
	return since != 0 && c.stuck(time.Since(time.Unix(0, since)))
}

// stuck says whether a Backend call unanswered for d is past a healthy answer:
// a quarter of OpTimeout.
func (c *Client) stuck(d time.Duration) bool { return d > c.opt.OpTimeout/4 }

// NewClient returns a Client on b, any Backend (each backend's package makes
// its own: redislease.New, pglock.New, ..., or Open by URL). Close the Client
// when done.
func NewClient(b Backend, opt *Options) (*Client, error) {
	o, err := opt.WithDefaults()
	if err != nil {
		return nil, err
	}
	prefix, err := randomToken()
	if err != nil {
		return nil, err
	}
	c := &Client{b: b, opt: o, valuePrefix: prefix + "."}
	if n, ok := b.(Notifier); ok {
		c.wake = waker{n: n, timeout: o.OpTimeout}
	} else if opt == nil || opt.MaxPoll == 0 {
		// Polling is how a waiter learns of every release here, not a safety net:
		// keep it short, or the other processes hear of a release only seconds
		// after it (see Client.obtain's yield).
		c.opt.MaxPoll = max(c.opt.MinPoll, 4*c.opt.MinPoll)
	}
	return c, nil
}

// Close stops the release subscription. Calls in flight are not interrupted.
func (c *Client) Close() error { return c.wake.close() }

// Do locks the named resources, runs fn, and releases them, whatever fn returns.
// Names are sorted first, so two callers with overlapping sets never deadlock.
// Waiting is bounded by ctx: when ctx ends first, Do returns an error wrapping
// ErrNotObtained and does not run fn. While fn runs, a watchdog renews the lease;
// if the lease is lost, fn's context is cancelled with a cause wrapping
// ErrLeaseLost, and so is Do's error when fn returns one.
func (c *Client) Do(ctx context.Context, names []string, fn func(ctx context.Context, g *Grant) error) error {
	names, err := normalize(names, c.b)
	if err != nil {
		return err
	}
	start := time.Now()
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.opt.Wait > 0 {
		actx, cancel = context.WithTimeout(ctx, c.opt.Wait)
	}
	c.opt.Metrics.Waiting(1)
	g, err := c.acquire(actx, names)
	c.opt.Metrics.Waiting(-1)
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotObtained) {
			c.opt.Metrics.Failed("timeout")
		} else {
			c.opt.Metrics.Failed("error")
		}
		return err
	}
	how := "obtained"
	if g.handoff {
		how = "handoff"
	}
	c.opt.Metrics.Granted(how, g.waited, time.Since(start))
	defer c.finish(ctx, g)
	return c.run(ctx, g, fn)
}

// run runs fn under a context the watchdog cancels when the lease is lost, unless
// the lease already ran out while it was being had.
func (c *Client) run(ctx context.Context, g *Grant, fn func(context.Context, *Grant) error) error {
	leases := distinct(g.leaseOf)
	if !time.Now().Before(earliestEnd(leases)) {
		for _, l := range leases {
			l.markLost()
		}
		c.opt.Metrics.Lost()
		return fmt.Errorf("%w: the lease ran out before the work could start", ErrLeaseLost)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := c.startWatchdog(cancel, leases)
	defer wd.stop() // deferred: a panicking fn must not leave the watchdog behind
	start := time.Now()
	err := fn(fctx, g)
	c.opt.Metrics.Held(time.Since(start))
	wd.stop()
	if !wd.wasLost() && !time.Now().Before(earliestEnd(leases)) {
		// The work outlived its lease before the watchdog could say so (the
		// process was stopped, or starved of CPU, past the lease's end): count it
		// lost and hand it to nobody. Its writes relied on the store's fence.
		for _, l := range leases {
			l.markLost()
		}
		c.opt.Metrics.Lost()
	}
	if cause := context.Cause(fctx); err != nil && errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

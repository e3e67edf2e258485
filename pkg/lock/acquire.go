package lock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// acquire takes the local slot of every name in order, then the Backend's lease of
// every name the previous local holder did not pass on.
func (c *Client) acquire(ctx context.Context, names []string) (*Grant, error) {
	g := &Grant{c: c, names: names, tokens: make([]int64, len(names)), leaseOf: make([]*lease, len(names)), handoff: true}
	for i, name := range names {
		if c.slot.tryAcquire(name) {
			continue
		}
		// About to wait for a local slot: hold no Backend lease meanwhile. Leases come
		// with local slots, so a caller holding one while it waits for a later slot
		// would take the two kinds of lock in another order than a caller waiting
		// in the Backend while holding its slots, and processes could deadlock in a ring.
		for j := range i {
			if g.leaseOf[j] != nil {
				c.releaseLease(ctx, g.leaseOf[j])
				g.leaseOf[j] = nil
			}
		}
		h, waited, granted, err := c.slot.acquire(ctx, name)
		if granted {
			g.leaseOf[i] = h.lease
		}
		if err != nil {
			c.abandon(ctx, g, i+btoi(granted))
			if c.unreachable() {
				return nil, fmt.Errorf("%w: waiting for a local holder whose backend calls fail: %w", ErrUnavailable, err)
			}
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
		}
		g.waited = g.waited || waited
		g.yield = g.yield || h.yield
	}

	// Backend leases, too, must be taken in sorted order: once a name has to be
	// obtained, the leases handed over for the names after it are given back and
	// obtained with it, or two multi-resource callers could each hold what the
	// other waits for.
	// missing is a suffix of names: from the first name not served by a handoff.
	k := len(names)
	for i, name := range names {
		l := g.leaseOf[i]
		if l != nil && k == len(names) {
			l.handoffs++
			if tok, ok := c.takeHandedOff(ctx, l, name); ok {
				g.tokens[i] = tok
				continue
			}
		} else if l != nil {
			c.releaseLease(ctx, l)
		}
		g.leaseOf[i] = nil
		k = min(k, i)
	}
	missing := names[k:]
	if len(missing) == 0 {
		return g, nil
	}
	g.handoff = false
	var last *lease
	var all [1][]string // no allocation unless the Backend splits the names
	all[0] = missing
	groups := all[:]
	if gr, ok := c.b.(Grouper); ok && len(missing) > 1 {
		groups = gr.Groups(missing)
	}
	for _, group := range groups {
		l, err := c.obtain(ctx, group, g.yield)
		if err != nil {
			c.abandon(ctx, g, len(names))
			return nil, err
		}
		toks, ok := l.take(time.Now(), 0)
		if !ok { // the obtain took longer than the lease: nothing is held
			c.releaseLease(ctx, l)
			c.abandon(ctx, g, len(names))
			return nil, fmt.Errorf("%w: obtained too late", ErrLeaseLost)
		}
		for j, name := range group {
			i := slices.Index(names, name)
			g.leaseOf[i], g.tokens[i] = l, toks[j]
		}
		last = l
	}
	// No watchdog ran for the leases held while later ones were awaited: renew
	// them now, or give up rather than run the work on a lease that may be gone.
	for _, l := range distinct(g.leaseOf) {
		if l == last {
			continue
		}
		if err := c.renew(ctx, l); err != nil {
			l.markLost()
			c.abandon(ctx, g, len(names))
			return nil, fmt.Errorf("%w: %w", ErrLeaseLost, err)
		}
	}
	return g, nil
}

// renew extends a lease by TTL, confirming it is still ours.
func (c *Client) renew(ctx context.Context, l *lease) error {
	ctx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
	defer cancel()
	sent := time.Now()
	if err := c.b.Renew(ctx, l.names, l.value, c.opt.TTL); err != nil {
		return err
	}
	l.renewed(sent, c.validity())
	return nil
}

// obtain gets one lease over names from the Backend, waiting for releases
// (announced or polled) until ctx ends. With yield it holds back before its first
// try.
//
// Without yield it tries once before it registers a watch: an uncontended
// caller only reads where the waker's announcements stand (and subscribes on the
// Client's first use). A release announced between that try and the watch is not
// lost: the count of announcements moved, and the caller tries again at once (so
// it does when no subscription could be made).
//
// A process that gave the lease up at MaxHandoffs (yield) hears the
// announcement of its own release as the other processes' waiters do, and its
// next local waiter used to race them for the lease at once and win it back
// often: the hot key's fairness across processes was 0.24-0.45. Such a waiter now
// holds back HandoffYield/8 after an announcement before its first try (see
// holdback), long enough for the others' tries to land first, short enough not
// to leave the resource idle when nobody else wants it. On a Backend that
// announces nothing (Azure's blob leases), the others learn of the release only
// by polling: such a waiter holds back 2×MinPoll, about one of their polls
// (MaxPoll is 4×MinPoll there); the hot key's fairness went from 0.04 to 0.96.
func (c *Client) obtain(ctx context.Context, names []string, yield bool) (*lease, error) {
	var before mark
	busy := 0 // tries that found the resource held
	if !yield {
		c.calling() // the first mark subscribes: a Backend call
		began := time.Now()
		m, err := c.wake.mark(ctx)
		if err != nil {
			if ctx.Err() != nil && !c.stuck(time.Since(began)) {
				return nil, fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
			}
			c.answered(false)
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		before = m
		l, err := c.attempt(ctx, names, busy)
		if l != nil || err != nil {
			return l, err
		}
		busy++
	}
	wt, err := c.wake.watch(ctx, names)
	if err != nil {
		return nil, err
	}
	defer c.wake.unwatch(wt)

	poll := c.opt.MinPoll
	first := poll
	if yield {
		first = c.opt.HandoffYield
		if c.wake.n == nil {
			// No announcement will tell the other processes' waiters that the
			// lease is free: leave it free for about one of their polls.
			first = 2 * c.opt.MinPoll
		}
	}
	timer := time.NewTimer(jitter(first))
	defer timer.Stop()
	wait := true
	if !yield {
		missed, announced := c.wake.missed(before)
		if announced {
			c.opt.Metrics.Wakeup("release")
		}
		wait = !missed
	}
	for ; ; wait = true {
		if wait {
			select {
			case <-wt.C:
				c.opt.Metrics.Wakeup("release")
				if err := c.holdBack(ctx, busy); err != nil {
					return nil, err
				}
			case <-timer.C:
				c.opt.Metrics.Wakeup("poll")
				poll = min(2*poll, c.opt.MaxPoll)
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
			}
		}
		l, err := c.attempt(ctx, names, busy)
		if l != nil || err != nil {
			return l, err
		}
		busy++
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(jitter(poll))
	}
}

// attempt makes one try: a lease, or nil and nil when the resource is busy.
// busy counts the caller's earlier tries that found the resource held: a wait
// that ends inside a try that had gone unanswered for long (stuck), with none
// such, ended because the Backend did not answer (ErrUnavailable), not because
// of another owner; a short wait that ends inside a slow first try is only
// ErrNotObtained.
func (c *Client) attempt(ctx context.Context, names []string, busy int) (*lease, error) {
	c.calling()
	began := time.Now()
	l, err := c.tryObtain(ctx, names)
	switch {
	case err == nil:
		c.answered(true)
		c.opt.Metrics.Attempt("ok")
		return l, nil
	case errors.Is(err, ErrBusy):
		c.answered(true)
		c.opt.Metrics.Attempt("busy")
		return nil, nil
	case ctx.Err() != nil && (busy > 0 || !errors.Is(ctx.Err(), context.DeadlineExceeded) || !c.stuck(time.Since(began))):
		c.pendingSince.Store(0) // cut short by the caller, not unanswered
		return nil, fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
	case ctx.Err() != nil:
		c.answered(false)
		c.opt.Metrics.Attempt("error")
		return nil, fmt.Errorf("%w: no answer before the wait ended: %w", ErrUnavailable, err)
	default:
		c.answered(false)
		c.opt.Metrics.Attempt("error")
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// holdback is how long a waiter that found the resource busy that many times
// waits after a release is announced before it tries: HandoffYield/8 for one
// that gave the lease up at MaxHandoffs and has not tried since (the
// announcement is most often of its own release), nothing for the others.
func (c *Client) holdback(busy int) time.Duration {
	if busy > 0 {
		return 0
	}
	return c.opt.HandoffYield / 8
}

// holdBack waits holdback(busy), unless ctx ends first.
func (c *Client) holdBack(ctx context.Context, busy int) error {
	d := c.holdback(busy)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
	}
}

// tryObtain makes one attempt at a lease over names, with its block of tokens
// per name: a single-resource lease may serve a cohort of local holders. A
// lease whose answer was lost (a timeout) may have been granted: it is
// released with the value chosen, or the resource would stay locked for a TTL.
func (c *Client) tryObtain(ctx context.Context, names []string) (*lease, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
	defer cancel()
	value := c.newValue()
	block := int64(1)
	if len(names) == 1 && c.opt.MaxHandoffs > 0 {
		block = int64(c.opt.MaxHandoffs) + 1
	}
	sent := time.Now()
	tops, err := c.b.Obtain(ctx, names, value, c.opt.TTL, block)
	if err != nil {
		if !errors.Is(err, ErrBusy) {
			c.releaseValue(ctx, names, value)
		}
		return nil, err
	}
	if len(tops) != len(names) {
		c.releaseValue(ctx, names, value)
		return nil, fmt.Errorf("lock: obtain: %d tokens for %d names", len(tops), len(names))
	}
	return newLease(value, names, sent, c.validity(), tops, block), nil
}

// randomToken is 16 random bytes, base64: as redislock makes its lock values.
func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("lock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// newValue names the owner of a new lease: the Client's random prefix (128 bits,
// drawn once) and a count. Values need only be unique, so that one owner never
// acts on another's lease; reading crypto/rand for each obtain cost a system
// call per acquisition.
func (c *Client) newValue() string {
	var buf [64]byte
	b := append(buf[:0], c.valuePrefix...)
	return string(strconv.AppendUint(b, c.valueSeq.Add(1), 36))
}

// jitter returns a random duration between d/2 and d, so that waiters of several
// processes do not poll in step.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

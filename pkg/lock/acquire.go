package lock

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// acquire takes the local slot of every name in order, then the Redis lease of
// every name the previous local holder did not pass on.
func (c *Client) acquire(ctx context.Context, names []string) (*Grant, error) {
	g := &Grant{c: c, names: names, tokens: make([]int64, len(names)), leaseOf: make([]*lease, len(names)), handoff: true}
	for i, name := range names {
		if c.slots.tryAcquire(name) {
			continue
		}
		// About to wait for a local slot: hold no Redis lease meanwhile. Leases come
		// with local slots, so a caller holding one while it waits for a later slot
		// would take the two kinds of lock in another order than a caller waiting
		// in Redis while holding its slots, and processes could deadlock in a ring.
		for j := range i {
			if g.leaseOf[j] != nil {
				c.releaseLease(ctx, g.leaseOf[j])
				g.leaseOf[j] = nil
			}
		}
		h, waited, granted, err := c.slots.acquire(ctx, name)
		if granted {
			g.leaseOf[i] = h.lease
		}
		if err != nil {
			c.abandon(ctx, g, i+btoi(granted))
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, err)
		}
		g.waited = g.waited || waited
		g.yield = g.yield || h.yield
	}

	// Redis leases, too, must be taken in sorted order: once a name has to be
	// obtained, the leases handed over for the names after it are given back and
	// obtained with it, or two multi-resource callers could each hold what the
	// other waits for.
	var missing []string
	for i, name := range names {
		l := g.leaseOf[i]
		if l != nil && len(missing) == 0 {
			l.handoffs++
			if tok, ok := c.takeHandedOff(ctx, l, name); ok {
				g.tokens[i] = tok
				continue
			}
		} else if l != nil {
			c.releaseLease(ctx, l)
		}
		g.leaseOf[i] = nil
		missing = append(missing, name)
	}
	if len(missing) == 0 {
		return g, nil
	}
	g.handoff = false
	var last *lease
	for _, group := range c.groups(missing) {
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
	if err := l.lk.Refresh(ctx, c.opt.TTL, nil); err != nil {
		reloadOnFailure(ctx, c.rdb, err)
		return err
	}
	l.renewed(sent, c.validity())
	return nil
}

// obtain gets one lease over names from Redis, waiting for releases (announced or
// polled) until ctx ends. With yield it holds back before its first try.
func (c *Client) obtain(ctx context.Context, names []string, yield bool) (*lease, error) {
	wt, err := c.wake.watch(ctx, names)
	if err != nil {
		return nil, err
	}
	defer c.wake.unwatch(wt)

	poll := c.opt.MinPoll
	timer := time.NewTimer(jitter(c.opt.HandoffYield))
	defer timer.Stop()
	for wait := yield; ; wait = true {
		if wait {
			select {
			case <-wt.C:
				c.opt.Metrics.wakeup("release")
			case <-timer.C:
				c.opt.Metrics.wakeup("poll")
				poll = min(2*poll, c.opt.MaxPoll)
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
			}
		}
		l, err := c.tryObtain(ctx, names)
		switch {
		case err == nil:
			c.opt.Metrics.attempt("ok")
			return l, nil
		case errors.Is(err, redislock.ErrNotObtained):
			c.opt.Metrics.attempt("busy")
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: %w", ErrNotObtained, context.Cause(ctx))
		default:
			c.opt.Metrics.attempt("error")
			return nil, err
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(jitter(poll))
	}
}

// tryObtain makes one attempt: SET NX PX through redislock, then the fencing
// tokens, checked against the lock in the same script, and with Replicas the
// replicas' acknowledgement. A lock not acknowledged in time is released.
func (c *Client) tryObtain(ctx context.Context, names []string) (*lease, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
	defer cancel()
	keys := make([]string, len(names))
	fence := make([]string, 0, 2*len(names))
	for i, n := range names {
		keys[i] = c.opt.Keys.Lock(n)
		fence = append(fence, keys[i], c.opt.Keys.Fence(n))
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	lk, err := c.rl.ObtainMulti(ctx, keys, c.opt.TTL, &redislock.Options{Token: token})
	if err != nil {
		reloadOnFailure(ctx, c.rdb, err)
		if !errors.Is(err, redislock.ErrNotObtained) {
			// The SET may have been applied before the call failed (a timeout): undo
			// it with the token we chose, or the resource stays locked for a TTL.
			c.releaseValue(ctx, names, token)
		}
		return nil, fmt.Errorf("lock: obtain: %w", err)
	}
	block := int64(1)
	if len(names) == 1 && c.opt.MaxHandoffs > 0 {
		block = int64(c.opt.MaxHandoffs) + 1
	}
	tops, err := c.fence(ctx, fence, lk.Token()+lk.Metadata(), block)
	if err != nil {
		reloadOnFailure(ctx, c.rdb, err)
		if errors.Is(err, redis.Nil) { // gone already: the TTL is shorter than a round trip
			return nil, redislock.ErrNotObtained
		}
		c.releaseValue(ctx, names, lk.Token()+lk.Metadata())
		return nil, fmt.Errorf("lock: fence: %w", err)
	}
	return newLease(lk, names, sent, c.validity(), tops, block), nil
}

// randomToken is a lock value as redislock makes them: 16 random bytes, base64.
func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("lock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// groups splits sorted names into the lease groups to obtain in order: all of them
// at once (ObtainMulti) when they share a slot or Redis is not a cluster, else one
// by one.
func (c *Client) groups(names []string) [][]string {
	if !c.cluster || len(names) == 1 {
		return [][]string{names}
	}
	first := slot(c.opt.Keys.Lock(names[0]))
	for _, n := range names[1:] {
		if slot(c.opt.Keys.Lock(n)) != first {
			out := make([][]string, len(names))
			for i, n := range names {
				out[i] = []string{n}
			}
			return out
		}
	}
	return [][]string{names}
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

package lock

import (
	"context"
	"time"
)

// takeHandedOff serves the next token of a lease the previous local holder passed
// on, after checking in Redis that the lease is still ours unless Redis confirmed
// it within HandoffCheck. A lease that fails the check is dropped (released if it
// might still be ours).
func (c *Client) takeHandedOff(ctx context.Context, l *lease, name string) (int64, bool) {
	now := time.Now()
	if toks, ok := l.take(now, c.minLeft()); ok {
		if l.checkedWithin(now, c.opt.HandoffCheck) {
			c.opt.Metrics.handoff("ok")
			return toks[0], true
		}
		opCtx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
		v, err := c.rdb.Get(opCtx, c.opt.Keys.Lock(name)).Result()
		cancel()
		reloadOnFailure(ctx, c.rdb, err)
		if err == nil && v == l.value() {
			l.checked(now)
			c.opt.Metrics.handoff("ok")
			return toks[0], true
		}
	}
	c.opt.Metrics.handoff("refused")
	c.releaseLease(ctx, l) // token-checked: deletes nothing that is not ours
	return 0, false
}

// finish passes every slot of g on: a single-resource lease goes to the next local
// waiter while the handoff bound and the lease allow; otherwise the lease is
// released in Redis (and announced) before the slot moves on.
func (c *Client) finish(ctx context.Context, g *Grant) {
	released := make(map[*lease]bool)
	for i, name := range g.names {
		l := g.leaseOf[i]
		if l != nil && len(l.names) == 1 && c.canHandOff(l) && c.slots.tryPass(name, handoff{lease: l}) {
			continue
		}
		yield := false
		if l != nil && !released[l] {
			_, _, lost := l.state()
			yield = !lost && l.handoffs >= c.opt.MaxHandoffs && c.opt.MaxHandoffs > 0
			c.releaseLease(ctx, l)
			released[l] = true
		}
		c.slots.pass(name, handoff{yield: yield})
	}
}

// abandon gives up the first n slots of a grant that could not be completed.
func (c *Client) abandon(ctx context.Context, g *Grant, n int) {
	g.names, g.leaseOf = g.names[:n], g.leaseOf[:n]
	c.finish(ctx, g)
}

// canHandOff reports whether l may pass to the next local holder: handoffs are on,
// the bound is not reached, and enough of the lease is left.
func (c *Client) canHandOff(l *lease) bool {
	if c.opt.MaxHandoffs <= 0 || l.handoffs >= c.opt.MaxHandoffs {
		return false
	}
	_, validUntil, lost := l.state()
	return !lost && time.Until(validUntil) >= c.minLeft()
}

// releaseLease deletes the lock keys that are still ours and announces the release.
// It runs even when the caller's context has ended, under its own deadline.
func (c *Client) releaseLease(ctx context.Context, l *lease) {
	l.markLost()
	c.releaseValue(ctx, l.names, l.value())
}

// releaseValue deletes the lock keys of names that still hold value and announces
// each release (release.lua).
func (c *Client) releaseValue(ctx context.Context, names []string, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opt.OpTimeout)
	defer cancel()
	keys := make([]string, len(names))
	args := make([]any, 0, 2+len(names))
	args = append(args, value, c.opt.Keys.Channel())
	for i, n := range names {
		keys[i] = c.opt.Keys.Lock(n)
		args = append(args, n)
	}
	// An error leaves the keys to expire with their TTL; nothing else can be done
	// here.
	reloadOnFailure(ctx, c.rdb, releaseScript.Run(ctx, c.rdb, keys, args...).Err())
}

package lock

import (
	"context"
	"slices"
	"time"
)

// takeHandedOff serves the next token of a lease the previous local holder passed
// on, after checking in the Backend that the lease is still ours unless it
// confirmed it within HandoffCheck. A lease that fails the check is dropped (released if it
// might still be ours).
func (c *Client) takeHandedOff(ctx context.Context, l *lease, name string) (int64, bool) {
	now := time.Now()
	if toks, ok := l.take(now, c.minLeft()); ok {
		if l.checkedWithin(now, c.opt.HandoffCheck) {
			c.opt.Metrics.Handoff("ok")
			return toks[0], true
		}
		opCtx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
		held, err := c.b.Held(opCtx, name, l.value)
		cancel()
		if err == nil && held {
			l.checked(now)
			c.opt.Metrics.Handoff("ok")
			return toks[0], true
		}
	}
	c.opt.Metrics.Handoff("refused")
	c.releaseLease(ctx, l) // token-checked: deletes nothing that is not ours
	return 0, false
}

// finish passes every slot of g on: a single-resource lease goes to the next local
// waiter while the handoff bound and the lease allow; otherwise the lease is
// released in the Backend (and announced) before the slot moves on.
func (c *Client) finish(ctx context.Context, g *Grant) {
	var released []*lease // a multi-resource lease appears once per name
	for i, name := range g.names {
		l := g.leaseOf[i]
		if l != nil && len(l.names) == 1 && c.canHandOff(l) && c.slot.tryPass(name, handoff{lease: l}) {
			continue
		}
		yield := false
		if l != nil && !slices.Contains(released, l) {
			_, _, lost := l.state()
			yield = !lost && l.handoffs >= c.opt.MaxHandoffs && c.opt.MaxHandoffs > 0
			c.releaseLease(ctx, l)
			released = append(released, l)
		}
		c.slot.pass(name, handoff{yield: yield})
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

// releaseLease ends the lease in the Backend, where it is still ours, and so
// tells the waiters. It runs even when the caller's context has ended, under its
// own deadline.
func (c *Client) releaseLease(ctx context.Context, l *lease) {
	l.markLost()
	c.releaseValue(ctx, l.names, l.value)
}

// releaseValue ends the leases of names that value still holds. An error leaves
// them to expire with their TTL; nothing else can be done here.
func (c *Client) releaseValue(ctx context.Context, names []string, value string) {
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.OpTimeout)
	defer cancel()
	_ = c.b.Release(ctx, names, value)
}

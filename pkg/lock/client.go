package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// Client takes per-resource locks in Redis for one process. Create one per process
// and share it: the local queue, the handoff and the release subscription only
// work among callers of the same Client.
type Client struct {
	rdb     redis.UniversalClient
	rl      *redislock.Client
	opt     Options
	cluster bool
	slots   slots
	wake    waker
}

// New returns a Client on rdb, a standalone, Sentinel or Cluster client. Set
// ContextTimeoutEnabled on it so that a stalled Redis cannot hold a call past its
// deadline. On a Cluster client, a call that fails without a reply from Redis
// asks it to reload its slot map, so that the slots of a master that died are
// found on its promoted replica. Close the Client when done.
func New(rdb redis.UniversalClient, opt *Options) (*Client, error) {
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	_, cluster := rdb.(*redis.ClusterClient)
	return &Client{
		rdb: rdb, rl: redislock.New(rdb), opt: o, cluster: cluster,
		wake: waker{rdb: rdb, channel: o.Keys.Channel(), timeout: o.OpTimeout},
	}, nil
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
	names, err := normalize(names)
	if err != nil {
		return err
	}
	start := time.Now()
	actx, cancel := ctx, context.CancelFunc(func() {})
	if c.opt.Wait > 0 {
		actx, cancel = context.WithTimeout(ctx, c.opt.Wait)
	}
	c.opt.Metrics.waiters(1)
	g, err := c.acquire(actx, names)
	c.opt.Metrics.waiters(-1)
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotObtained) {
			c.opt.Metrics.failed("timeout")
		} else {
			c.opt.Metrics.failed("error")
		}
		return err
	}
	how := "redis"
	if g.handoff {
		how = "handoff"
	}
	c.opt.Metrics.granted(how, g.waited, time.Since(start))
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
		c.opt.Metrics.lost()
		return fmt.Errorf("%w: the lease ran out before the work could start", ErrLeaseLost)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wd := c.startWatchdog(cancel, leases)
	defer wd.stop() // deferred: a panicking fn must not leave the watchdog behind
	start := time.Now()
	err := fn(fctx, g)
	c.opt.Metrics.held(time.Since(start))
	wd.stop()
	if cause := context.Cause(fctx); err != nil && errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		err = fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// reloadOnFailure asks a Cluster client to reload its slot map when err, from a
// Redis call, is not Redis's answer (a refused dial, a broken connection, a
// timeout): the node may have died and its slots moved to a promoted replica.
//
// Why: when a command cannot reach its slot's master, go-redis's
// ClusterClient.process retries it and marks the node failing, yet routes it to
// the same node again: clusterState.slotMasterNode ignores that mark. The slot
// map is reloaded only on a MOVED or ASK reply, which a dead node never sends,
// or by clusterStateHolder.Get once the map is older than
// ClusterOptions.ClusterStateReloadInterval (60s by default). So after a
// failover every call on the dead master's slots failed with "connection
// refused" for up to a minute after its replica had taken over. ReloadState
// coalesces requests (one CLUSTER SLOTS at a time, then 200ms apart), so asking
// on every failure is cheap; until the promotion a reload finds the old map and
// the next failure asks again. It runs in the background, under the client's
// dial and read timeouts, and ignores ctx.
func reloadOnFailure(ctx context.Context, rdb redis.UniversalClient, err error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var reply redis.Error // redis.Nil included
	if errors.As(err, &reply) || errors.Is(err, redislock.ErrNotObtained) {
		return
	}
	cc.ReloadState(ctx)
}

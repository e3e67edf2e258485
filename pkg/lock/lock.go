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

var (
	// ErrNotObtained is returned when the caller's context ends before the lock is had.
	// The error also wraps the context's cause (context.DeadlineExceeded, usually).
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrLeaseLost is the cause with which a function's context is cancelled when its
	// lease is gone (deleted, expired, taken over) or could not be renewed before it
	// ran out. Test it with errors.Is on context.Cause(ctx) or on Do's error.
	ErrLeaseLost = errors.New("lock: lease lost")

	// ErrInvalidOptions is returned by New for options that cannot work.
	ErrInvalidOptions = errors.New("lock: invalid options")
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// TTL is the lease: how long a lock outlives a holder that stops renewing it,
	// and so how long a crashed holder blocks its resource. Default 10s.
	TTL time.Duration

	// RenewEvery is the watchdog's period: at most TTL/2. Default TTL/3, as
	// Redisson does.
	RenewEvery time.Duration

	// OpTimeout bounds every Redis call but the watchdog's, whose deadline is the
	// end of the lease. Default TTL/3.
	OpTimeout time.Duration

	// MaxHandoffs bounds how many local callers in a row are served by one lease
	// before it is released so other processes get a turn. Default 32; a negative
	// value turns local handoff off.
	MaxHandoffs int

	// MinPoll and MaxPoll bound the jittered, doubling poll with which a waiter
	// retries when no release announcement reaches it (a holder that crashed, a lost
	// message). Defaults 10ms and 500ms.
	MinPoll, MaxPoll time.Duration

	// HandoffCheck: a lease passed on locally is checked in Redis (one GET) before
	// the next holder gets a token, unless Redis confirmed it (obtain, renewal or an
	// earlier check) less than HandoffCheck ago. Default 1ms; a negative value checks
	// at every handoff. Either way the store's fence check is what refuses a holder
	// whose lease was lost; this bounds how stale a local holder's belief can be.
	HandoffCheck time.Duration

	// HandoffYield is how long a waiter holds back after its process gave the lease
	// up at MaxHandoffs, unless a release wakes it first. Default 1ms.
	HandoffYield time.Duration

	// Wait, when set, bounds how long Do waits for a grant, on top of the caller's
	// context; the function itself runs under the caller's context only.
	Wait time.Duration

	// Keys names the Redis keys. Default namespace "sku".
	Keys Keys

	// Metrics, when set, records what the Client does.
	Metrics *Metrics
}

func (o *Options) withDefaults() (Options, error) {
	var opt Options
	if o != nil {
		opt = *o
	}
	if opt.TTL == 0 {
		opt.TTL = 10 * time.Second
	}
	if opt.RenewEvery == 0 {
		opt.RenewEvery = opt.TTL / 3
	}
	if opt.OpTimeout == 0 {
		opt.OpTimeout = opt.TTL / 3
	}
	if opt.MaxHandoffs == 0 {
		opt.MaxHandoffs = 32
	}
	if opt.MinPoll == 0 {
		opt.MinPoll = 10 * time.Millisecond
	}
	if opt.MaxPoll == 0 {
		opt.MaxPoll = max(opt.MinPoll, 500*time.Millisecond)
	}
	if opt.HandoffCheck == 0 {
		opt.HandoffCheck = time.Millisecond
	}
	if opt.HandoffYield == 0 {
		opt.HandoffYield = time.Millisecond
	}
	switch {
	case opt.TTL < 10*time.Millisecond:
		return opt, fmt.Errorf("%w: TTL %s is under 10ms", ErrInvalidOptions, opt.TTL)
	case opt.RenewEvery < 0 || opt.RenewEvery > opt.TTL/2:
		return opt, fmt.Errorf("%w: RenewEvery %s must be between 0 and TTL/2, so a failed renewal can be retried", ErrInvalidOptions, opt.RenewEvery)
	case opt.OpTimeout < 0 || opt.MinPoll < 0 || opt.MaxPoll < opt.MinPoll || opt.HandoffYield < 0 || opt.Wait < 0:
		return opt, fmt.Errorf("%w: negative duration or MaxPoll under MinPoll", ErrInvalidOptions)
	}
	return opt, nil
}

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
// deadline. Close the Client when done.
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

// Grant is what a caller holds while its function runs: the resources and, for
// each, a fencing token larger than any issued before for that resource. Pass the
// token with every write the lock protects, and have the store refuse a write whose
// token is older than one it has already accepted.
type Grant struct {
	names   []string
	tokens  []int64
	leaseOf []*lease // per name; one multi-resource lease may appear several times
	waited  bool
	handoff bool // every lease came from the previous local holder
	yield   bool
}

// Names returns the resources of the grant, sorted and without duplicates.
func (g *Grant) Names() []string { return g.names }

// Token returns the fencing token of name, or 0 when name is not in the grant.
func (g *Grant) Token(name string) int64 {
	for i, n := range g.names {
		if n == name {
			return g.tokens[i]
		}
	}
	return 0
}

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

// acquire takes the local slot of every name in order, then the Redis lease of
// every name the previous local holder did not pass on.
func (c *Client) acquire(ctx context.Context, names []string) (*Grant, error) {
	g := &Grant{names: names, tokens: make([]int64, len(names)), leaseOf: make([]*lease, len(names)), handoff: true}
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
		return err
	}
	l.renewed(sent, c.validity())
	return nil
}

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
// tokens, checked against the lock in the same script.
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
	tops, err := fenceScript.Run(ctx, c.rdb, fence, lk.Token()+lk.Metadata(), block, fenceTTL.Milliseconds()).Int64Slice()
	if err != nil {
		if errors.Is(err, redis.Nil) { // gone already: the TTL is shorter than a round trip
			return nil, redislock.ErrNotObtained
		}
		c.releaseValue(ctx, names, lk.Token()+lk.Metadata())
		return nil, fmt.Errorf("lock: fence: %w", err)
	}
	return newLease(lk, names, sent, c.validity(), tops, block), nil
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
	// An error leaves the keys to expire with their TTL; nothing else can be done.
	_ = releaseScript.Run(ctx, c.rdb, keys, args...).Err()
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

// validity is how long a lease is ours after the command that set it was sent:
// TTL less an allowance for clock drift (1% + 2ms, as in the Redis documentation)
// and for a late timer on a loaded machine (4% more), so that the work is cancelled
// before the lease can end in Redis.
func (c *Client) validity() time.Duration { return c.opt.TTL - c.opt.TTL/20 - 2*time.Millisecond }

// minLeft is the least lease left for a handoff to be worth it.
func (c *Client) minLeft() time.Duration { return c.opt.RenewEvery / 2 }

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

func distinct(ls []*lease) []*lease {
	out := make([]*lease, 0, len(ls))
	for _, l := range ls {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

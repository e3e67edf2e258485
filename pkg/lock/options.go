package lock

import (
	"fmt"
	"time"
)

// Options configure a Client. The zero value is usable.
type Options struct {
	// TTL is the lease: how long a lock outlives a holder that stops renewing it,
	// and so how long a crashed holder blocks its resource. Default 10s.
	TTL time.Duration

	// RenewEvery is the watchdog's period: at most TTL/2. Default TTL/3, as
	// Redisson does.
	RenewEvery time.Duration

	// OpTimeout bounds every Backend call but the watchdog's, whose deadline is the
	// end of the lease. Default TTL/3.
	OpTimeout time.Duration

	// MaxHandoffs bounds how many local callers in a row are served by one lease
	// before it is released so other processes get a turn. Default 32; a negative
	// value turns local handoff off.
	MaxHandoffs int

	// MinPoll and MaxPoll bound the jittered, doubling poll with which a waiter
	// retries when no release announcement reaches it (a holder that crashed, a lost
	// message). Defaults 10ms and 500ms; on a Backend that is not a Notifier,
	// where polling is how every release is learnt, MaxPoll defaults to 4×MinPoll.
	MinPoll, MaxPoll time.Duration

	// HandoffCheck: a lease passed on locally is checked in the Backend (Held)
	// before the next holder gets a token, unless the Backend confirmed it (obtain, renewal or an
	// earlier check) less than HandoffCheck ago. Default 1ms; a negative value checks
	// at every handoff. Either way the store's fence check is what refuses a holder
	// whose lease was lost; this bounds how stale a local holder's belief can be.
	HandoffCheck time.Duration

	// HandoffYield is how long a waiter holds back after its process gave the lease
	// up at MaxHandoffs, unless a release wakes it first; then it waits
	// HandoffYield/8 more, so that the other processes' waiters try first.
	// Default 1ms. On a Backend that is not a Notifier nothing tells the others
	// of the release, so the waiter holds back 2×MinPoll instead: about one of
	// their polls.
	HandoffYield time.Duration

	// Wait, when set, bounds how long Do waits for a grant, on top of the caller's
	// context; the function itself runs under the caller's context only.
	Wait time.Duration

	// Replicas (New only: the Redis backend), when above 0, makes every lease
	// obtained from Redis wait (WAIT) until that many replicas have it, for at
	// most ReplicaTimeout, and fail with ErrNotReplicated otherwise (released). A failover to an acknowledging
	// replica then keeps the lock, where it could otherwise lose it and grant it
	// twice; the cost is a round trip and the replicas' lag per lease, and no lock
	// at all while fewer replicas are up. Renewals and handoffs do not wait.
	// Redisson does the same by default (checkLockSyncedSlaves).
	Replicas int

	// ReplicaTimeout bounds the wait for Replicas. Default OpTimeout/2.
	ReplicaTimeout time.Duration

	// Keys names the Redis keys (New only: the Redis backend). Default namespace
	// "sku".
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
	if opt.ReplicaTimeout == 0 {
		opt.ReplicaTimeout = opt.OpTimeout / 2
	}
	if opt.HandoffYield == 0 {
		opt.HandoffYield = time.Millisecond
	}
	switch {
	case opt.TTL < 10*time.Millisecond:
		return opt, fmt.Errorf("%w: TTL %s is under 10ms", ErrInvalidOptions, opt.TTL)
	case opt.RenewEvery < 0 || opt.RenewEvery > opt.TTL/2:
		return opt, fmt.Errorf("%w: RenewEvery %s must be between 0 and TTL/2, so a failed renewal can be retried", ErrInvalidOptions, opt.RenewEvery)
	case opt.OpTimeout < 0 || opt.MinPoll < 0 || opt.MaxPoll < opt.MinPoll || opt.HandoffYield < 0 || opt.Wait < 0 || opt.Replicas < 0:
		return opt, fmt.Errorf("%w: negative duration or count, or MaxPoll under MinPoll", ErrInvalidOptions)
	case opt.Replicas > 0 && (opt.ReplicaTimeout <= 0 || opt.ReplicaTimeout >= opt.OpTimeout):
		return opt, fmt.Errorf("%w: ReplicaTimeout %s must be above 0 and under OpTimeout %s", ErrInvalidOptions, opt.ReplicaTimeout, opt.OpTimeout)
	}
	return opt, nil
}

// validity is how long a lease is ours after the command that set it was sent:
// TTL less an allowance for clock drift (1% + 2ms, as in the Redis documentation)
// and for a late timer on a loaded machine (4% more), so that the work is cancelled
// before the lease can end in the lock service.
func (c *Client) validity() time.Duration { return c.opt.TTL - c.opt.TTL/20 - 2*time.Millisecond }

// minLeft is the least lease left for a handoff to be worth it.
func (c *Client) minLeft() time.Duration { return c.opt.RenewEvery / 2 }

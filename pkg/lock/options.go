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

	// Metrics, when set, records what the Client does (package lockprom's are
	// Prometheus collectors). Default NopMetrics.
	Metrics Metrics
}

// WithDefaults returns the options NewClient uses: o (nil is the zero value)
// with each unset field at its default. It fails with an error wrapping
// ErrInvalidOptions for options that cannot work. A backend's constructor that
// derives its own settings from the Client's (redislease.NewClient) calls it.
func (o *Options) WithDefaults() (Options, error) {
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
	if opt.Metrics == nil {
		opt.Metrics = NopMetrics{}
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
		return opt, fmt.Errorf("%w: negative duration, or MaxPoll under MinPoll", ErrInvalidOptions)
	}
	return opt, nil
}

// validity is how long a lease is ours after the command that set it was sent:
// TTL less an allowance for clock drift (1% + 2ms, as in the Redlock documentation)
// and for a late timer on a loaded machine (4% more), so that the work is cancelled
// before the lease can end in the lock service.
func (c *Client) validity() time.Duration { return c.opt.TTL - c.opt.TTL/20 - 2*time.Millisecond }

// minLeft is the least lease left for a handoff to be worth it.
func (c *Client) minLeft() time.Duration { return c.opt.RenewEvery / 2 }

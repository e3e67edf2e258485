package redislease

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
)

// NewClient returns a lock.Client on the Redis backend on rdb (New with opt,
// then lock.NewClient with copt): the shortcut for a program on one Redis.
// rdb is a standalone, Sentinel or Cluster client; set ContextTimeoutEnabled
// on it so that a stalled Redis cannot hold a call past its deadline. With
// Replicas, opt.ReplicaTimeout defaults to half the Client's OpTimeout and
// must be under it; opt.Metrics defaults to copt.Metrics when that counts
// replica waits too (lockprom's do). Either options may be nil. Close the
// Client when done.
func NewClient(rdb redis.UniversalClient, opt *Options, copt *lock.Options) (*lock.Client, error) {
	c, err := copt.WithDefaults()
	if err != nil {
		return nil, err
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.ReplicaTimeout == 0 {
		o.ReplicaTimeout = c.OpTimeout / 2
	}
	if o.Replicas > 0 && o.ReplicaTimeout >= c.OpTimeout {
		return nil, fmt.Errorf("%w: ReplicaTimeout %s must be above 0 and under OpTimeout %s", lock.ErrInvalidOptions, o.ReplicaTimeout, c.OpTimeout)
	}
	if o.Metrics == nil {
		o.Metrics, _ = c.Metrics.(ReplicaMetrics)
	}
	b, err := New(rdb, &o)
	if err != nil {
		return nil, err
	}
	return lock.NewClient(b, copt)
}

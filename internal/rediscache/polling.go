package rediscache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// PollingLocker is the lock-polling strategy's lock: plain bsm/redislock, one
// SET NX per SKU in sorted order, retried every PollEvery while it waits, no
// watchdog (the work gets the lease's time and no more) and no fencing token.
// It is the common practice, kept to be measured against pkg/lock.
type PollingLocker struct {
	c         *redislock.Client
	keys      redislease.Keys
	ttl, wait time.Duration
}

var _ orders.Locker = (*PollingLocker)(nil)

// PollEvery is how often a waiting PollingLocker tries again.
const PollEvery = 10 * time.Millisecond

// NewPollingLocker returns the locker. Its keys are pkg/lock/redislease's, so that both
// exclude each other on one namespace.
func NewPollingLocker(rdb redis.UniversalClient, keys redislease.Keys, ttl, wait time.Duration) *PollingLocker {
	return &PollingLocker{c: redislock.New(rdb), keys: keys, ttl: ttl, wait: wait}
}

// WithLocks runs fn holding the locks of skus, with no fencing tokens.
func (l *PollingLocker) WithLocks(ctx context.Context, skus []string, fn func(context.Context, orders.Grant) error) error {
	skus = slices.Compact(slices.Sorted(slices.Values(skus)))
	wctx, cancel := context.WithTimeout(ctx, l.wait)
	defer cancel()
	var held []*redislock.Lock
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		for _, lk := range held {
			_ = lk.Release(rctx) // an expired lease is gone already
		}
	}()
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(PollEvery)}
	var deadline time.Time // the first lease's end: no work after it
	for _, sku := range skus {
		lk, err := l.c.Obtain(wctx, l.keys.Lock(sku), l.ttl, opts)
		switch {
		case errors.Is(err, redislock.ErrNotObtained), err != nil && wctx.Err() != nil && ctx.Err() == nil:
			return fmt.Errorf("%w: %w", orders.ErrBusy, err)
		case err != nil:
			return orders.Unavailable(orders.DependencyRedis, fmt.Errorf("obtain: %w", err))
		}
		if held == nil {
			deadline = time.Now().Add(l.ttl)
		}
		held = append(held, lk)
	}
	fctx, cancelWork := context.WithDeadline(ctx, deadline) // no renewal: the first lease bounds the work
	defer cancelWork()
	return fn(fctx, noFence{})
}

// noFence is the grant of a lock that issues no tokens: nil Fences, whose
// every token reads orders.NoFence.
type noFence struct{}

var _ orders.Grant = noFence{}

func (noFence) Fences() orders.Fences { return nil }

// Advance is never needed: without tokens the store fences nothing.
func (noFence) Advance(context.Context, string, int64) error {
	return errors.New("lock-polling issues no fencing tokens to advance")
}

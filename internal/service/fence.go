package service

import (
	"context"

	"github.com/stockguard/stockguard/internal/lease"
	"github.com/stockguard/stockguard/internal/orders"
)

// fenced runs write with the grant's tokens, a token the database refuses
// advanced past the one it had (lease.Fenced), counted and logged.
func (s *Service) fenced(ctx context.Context, g orders.Grant, write func(orders.Fences) error) error {
	return lease.Fenced(ctx, g, s.log, s.obs.FenceRejected, write)
}

// writeLocked is how every write of stock but an order's is made (a confirm, a
// release, a cancel, a restock or set, the sweeper's expiry): under the locks of
// skus, fenced with the grant's tokens, then the cache set to the available
// stock write returns and redis-atomic's counters dropped, or, after a
// failure, the cache entries dropped (afterFailure). write may run more than
// once (fenced advances a refused token and tries again); the last run's
// answer is the one that counts.
func (s *Service) writeLocked(ctx context.Context, skus []string,
	write func(ctx context.Context, fences orders.Fences) (after map[string]int64, err error),
) error {
	return s.locker.WithLocks(ctx, skus, func(ctx context.Context, g orders.Grant) error {
		var after map[string]int64
		err := s.fenced(ctx, g, func(fences orders.Fences) error {
			var err error
			after, err = write(ctx, fences)
			return err
		})
		if err != nil {
			s.afterFailure(ctx, skus, err)
			return err
		}
		s.setCache(ctx, after, g.Fences())
		s.dropCounters(ctx, skus)
		return nil
	})
}

package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockguard/stockguard/internal/orders"
)

// fenced runs write with the grant's tokens (none without a grant). The store,
// not Redis, is the authority on tokens (I3): when it refuses one it has already
// committed, or a smaller one, and this holder still has the lock, Redis lost the
// counter's latest writes (a failover to a replica that lagged). The token is
// then advanced past the committed one, which the lock checks is still ours, and
// the write tried again: one more round trip, not a burst of refusals. A holder
// that lost its lock gets the refusal, and so does a refusal of a token this
// grant does not hold (the sweeper's lease, refused inside a SKU's grant: the
// lease's grant, further out, advances it).
func (s *Service) fenced(ctx context.Context, g orders.Grant, write func(orders.Fences) error) error {
	if g == nil || g.Fences() == nil {
		return write(nil)
	}
	for tries := len(g.Fences()); ; tries-- { // one advance per SKU at most, in the common case
		err := write(g.Fences())
		var stale *orders.StaleFenceError
		if !errors.As(err, &stale) || tries == 0 {
			return err
		}
		if _, held := g.Fences()[stale.SKU]; !held {
			return err
		}
		if aerr := g.Advance(ctx, stale.SKU, stale.Last); aerr != nil {
			return fmt.Errorf("%w; not advanced: %w", err, aerr)
		}
		s.obs.FenceRejected(stale.SKU)
		s.log.WarnContext(ctx, "the database had committed this fencing token or a larger one; advanced past it",
			"sku", stale.SKU, "token", stale.Token, "committed", stale.Last, "advanced", g.Fences()[stale.SKU])
	}
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

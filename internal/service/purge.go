package service

import (
	"context"
	"time"
)

// Idempotency records are kept for Config.Retention, then purged. Every replica
// purges (the deletes are idempotent); making it one replica at a time, under a
// leader lease, is the once-per-cluster job of the reservations' sweeper.
const (
	purgeRound  = 1000 // records deleted per statement: short transactions
	purgeRounds = 100  // rounds per purge, so that one purge is bounded
)

// RunPurge purges expired records every interval until ctx ends.
func (s *Service) RunPurge(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.Purge(ctx); err != nil {
			s.log.WarnContext(ctx, "idempotency records not purged", "purged", n, "err", err)
		} else if n > 0 {
			s.log.InfoContext(ctx, "idempotency records purged", "purged", n, "retention", s.cfg.Retention.String())
		}
	}
}

// Purge deletes the idempotency records older than the retention, in bounded
// rounds, and returns how many it deleted.
func (s *Service) Purge(ctx context.Context) (int, error) {
	cutoff := s.now().Add(-s.cfg.Retention)
	total := 0
	for range purgeRounds {
		n, err := s.store.PurgeRecords(ctx, cutoff, purgeRound)
		total += n
		if err != nil || n < purgeRound {
			return total, err
		}
	}
	return total, nil
}

package service

import (
	"context"
	"errors"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// job is work done once per cluster: every replica runs it, the holder of its
// lease works, and the database checks the lease's token on each of its
// writes. The sweeper and the relay are jobs.
type job struct {
	name  string // in the logs
	lease string
	// leading tells the observer that this replica leads, or no longer does.
	leading func(bool)
	// retry is the pause before contending again after the lease was lost or
	// not had.
	retry time.Duration
	// work runs while the lease is held, until it is lost (ctx ends) or the
	// database refuses its token for good (orders.ErrStaleLeader).
	work func(ctx context.Context, g orders.Grant) error
}

// runJob contends for j's lease until ctx ends, and runs j.work while it holds
// it: the loop of the sweeper and the relay, written once.
func (s *Service) runJob(ctx context.Context, j job) {
	for ctx.Err() == nil {
		err := s.leader.WithLocks(ctx, []string{j.lease}, func(ctx context.Context, g orders.Grant) error {
			s.log.InfoContext(ctx, j.name+": leading", "token", g.Fences()[j.lease])
			j.leading(true)
			defer j.leading(false)
			err := j.work(ctx, g)
			s.log.InfoContext(ctx, j.name+": no longer leading", "token", g.Fences()[j.lease], "reason", err)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, orders.ErrBusy): // another replica leads; the wait was the pause
			continue
		case err != nil:
			s.log.WarnContext(ctx, j.name+": lease lost or not had", "err", err)
		}
		if !sleep(ctx, j.retry) {
			return
		}
	}
}

// Package lease is the work done once per cluster, and the fencing of its
// writes: every replica runs a Job, the holder of the job's leader lease (a
// lock that issues fencing tokens) works, and the database checks the
// lease's token on each of its writes (Fenced). The sweeper (package service)
// and the relay (package events) are jobs. It imports the domain (package
// orders) only.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// Job is work done once per cluster.
type Job struct {
	Name  string // in the logs
	Lease string // the lease's name: ':' in it, so that it names no SKU's lock
	// Leading tells the observer that this replica leads, or no longer does.
	Leading func(bool)
	// Retry is the pause before contending again after the lease was lost or
	// not had.
	Retry time.Duration
	// Work runs while the lease is held, until it is lost (ctx ends) or the
	// database refuses its token for good (orders.ErrStaleLeader).
	Work func(ctx context.Context, g orders.Grant) error
}

// Run contends for j's lease on leader until ctx ends, and runs j.Work while
// it holds it: take the lease, run, step down on its loss, contend again.
func (j Job) Run(ctx context.Context, leader orders.Locker, log *slog.Logger) {
	for ctx.Err() == nil {
		err := leader.WithLocks(ctx, []string{j.Lease}, func(ctx context.Context, g orders.Grant) error {
			log.InfoContext(ctx, j.Name+": leading", "token", g.Fences()[j.Lease])
			j.Leading(true)
			defer j.Leading(false)
			err := j.Work(ctx, g)
			log.InfoContext(ctx, j.Name+": no longer leading", "token", g.Fences()[j.Lease], "reason", err)
			return err
		})
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, orders.ErrBusy): // another replica leads; the wait was the pause
			continue
		case err != nil:
			log.WarnContext(ctx, j.Name+": lease lost or not had", "err", err)
		}
		if !Sleep(ctx, j.Retry) {
			return
		}
	}
}

// Fenced runs write with the grant's tokens (none without a grant). The
// store, not the lock service, is the authority on tokens (I3): when it
// refuses one it has already committed, or a smaller one, and this holder
// still has the lock, the lock service lost the counter's latest writes (a
// failover to a replica that lagged). The token is then advanced past the
// committed one, which the lock checks is still ours, rejected told of it,
// and the write tried again: one more round trip, not a burst of refusals. A
// holder that lost its lock gets the refusal, and so does a refusal of a token
// this grant does not hold (the sweeper's lease, refused inside a SKU's grant:
// the lease's grant, further out, advances it).
func Fenced(ctx context.Context, g orders.Grant, log *slog.Logger, rejected func(sku string), write func(orders.Fences) error) error {
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
		rejected(stale.SKU)
		log.WarnContext(ctx, "the database had committed this fencing token or a larger one; advanced past it",
			"sku", stale.SKU, "token", stale.Token, "committed", stale.Last, "advanced", g.Fences()[stale.SKU])
	}
}

// Sleep sleeps d or until ctx ends (false then).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

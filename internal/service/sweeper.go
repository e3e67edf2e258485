package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/lease"
	"github.com/stockguard/stockguard/internal/orders"
)

// The sweeper: the job that must run once per cluster however many replicas run
// it. Every replica runs RunSweeper, and the one that holds the leader lease
// (a lock of pkg/lock under SweeperLease, renewed by its watchdog) works: it
// expires the holds past their expiry, returning their units to available, and
// purges old idempotency records. Every write it makes carries the lease's
// fencing token, which the database checks (orders.Leader), so a leader paused
// or cut off past its lease cannot write after a newer one has; its per-SKU
// writes also take the SKUs' locks and tokens, as an order's do. When the
// leader dies another replica gets the lease within one lock TTL.

// SweeperLease is the name of the sweeper's leader lease: ':' is not in any
// SKU, so it names no SKU's lock.
const SweeperLease = "job:sweeper"

// The sweeper's bounds.
const (
	sweepHolds = 500 // holds read per round, in expiry order
	// sweepSlice is the most holds one expiry ends: on lock-batch it rides in
	// an orders' batch, and a slice this small keeps that batch's time near an
	// orders-only one while a mass expiry is swept.
	sweepSlice  = 50
	sweepRounds = 200 // rounds per sweep, so that one sweep is bounded
	purgeRound  = 1000
	purgeRounds = 100
)

// RunSweeper contends for the leader lease until ctx ends, and sweeps every
// Config.SweepInterval while it holds it.
func (s *Service) RunSweeper(ctx context.Context) {
	lease.Job{Name: "sweeper", Lease: SweeperLease, Leading: s.obs.SweeperLeading, Retry: s.cfg.SweepInterval, Work: s.lead}.Run(ctx, s.leader, s.log)
}

// lead sweeps every interval, and purges every purge interval, until the lease
// is lost (ctx ends) or the database refuses its token for good. The lease's
// token is fenced as a SKU's is: a leader whose token the database refuses
// while it still holds the lease (Redis lost the counter in a restart or a
// failover) advances it and writes again; a former leader stops.
func (s *Service) lead(ctx context.Context, g orders.Grant) error {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	var purged, audited time.Time
	for {
		var n int
		err := s.fenced(ctx, g, func(f orders.Fences) error {
			var err error
			n, err = s.Sweep(ctx, orders.Leader{Name: SweeperLease, Token: f[SweeperLease]})
			return err
		})
		switch {
		case errors.Is(err, orders.ErrStaleLeader) || ctx.Err() != nil:
			return errors.Join(err, context.Cause(ctx))
		case err != nil:
			s.log.WarnContext(ctx, "sweeper: sweep failed; trying again", "expired", n, "err", err)
		case n > 0:
			s.log.InfoContext(ctx, "sweeper: expired holds returned to available", "expired", n, "token", g.Fences()[SweeperLease])
		}
		if now := s.now(); now.Sub(purged) >= s.cfg.PurgeInterval {
			purged = now
			err := s.fenced(ctx, g, func(f orders.Fences) error {
				var err error
				n, err = s.Purge(ctx, orders.Leader{Name: SweeperLease, Token: f[SweeperLease]})
				return err
			})
			switch {
			case errors.Is(err, orders.ErrStaleLeader):
				return err
			case err != nil:
				s.log.WarnContext(ctx, "idempotency records not purged", "purged", n, "err", err)
			case n > 0:
				s.log.InfoContext(ctx, "idempotency records purged", "purged", n, "retention", s.cfg.Retention.String())
			}
		}
		if now := s.now(); now.Sub(audited) >= s.cfg.AuditInterval {
			audited = now
			s.audit(ctx)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// audit reads the shallow audit (one row per SKU, the overdue holds by index)
// and tells the observer, so that an alert sees an oversell or a stuck sweeper
// without anyone asking GET /v1/audit.
func (s *Service) audit(ctx context.Context) {
	a, err := s.store.Audit(ctx, false, s.cfg.SweepInterval+s.cfg.LockTTL)
	if err != nil {
		s.log.WarnContext(ctx, "sweeper: audit failed", "err", err)
		return
	}
	var overdue int64
	if a.Holds != nil {
		overdue = a.Holds.Overdue
	}
	if a.Oversold > 0 || overdue > 0 || !a.Consistent {
		s.log.ErrorContext(ctx, "audit: invariant broken", "oversold", a.Oversold, "holds_overdue", overdue, "consistent", a.Consistent)
	}
	s.obs.Audited(a.Oversold, overdue)
}

// Sweep expires the holds past their expiry, earliest first, in bounded rounds,
// and returns how many it expired. The holds of one round are expired by SKU
// set, each set under its own SKUs' locks only, in slices of at most
// sweepSlice holds: a SKU that buyers keep busy delays its own holds, not every
// other SKU's, a set whose locks cannot be had in time is left for the next
// sweep while the others go on, and on lock-batch orders keep flowing between
// the slices. A hold
// confirmed, released or extended meanwhile is left be.
func (s *Service) Sweep(ctx context.Context, l orders.Leader) (int, error) {
	total := 0
	for range sweepRounds {
		due, err := s.store.Expired(ctx, sweepHolds)
		if err != nil || len(due) == 0 {
			return total, err
		}
		var busy error
		for _, set := range bySKUSet(due) {
			for slice := range slices.Chunk(set, sweepSlice) {
				n, err := s.expire(ctx, slice, l)
				total += n
				switch {
				case errors.Is(err, orders.ErrStaleLeader):
					s.obs.SweepRefused()
					return total, err
				case errors.Is(err, orders.ErrBusy), errors.Is(err, orders.ErrOverloaded):
					busy = err // the next sweep tries this set again
				case err != nil:
					return total, err
				}
				if busy != nil {
					break
				}
			}
		}
		if busy != nil || len(due) < sweepHolds {
			return total, busy
		}
	}
	return total, nil
}

// expire ends holds under their SKUs' locks.
func (s *Service) expire(ctx context.Context, holds []orders.Reservation, l orders.Leader) (int, error) {
	ids := make([]string, len(holds))
	var skus []string
	for i, h := range holds {
		ids[i] = h.ID
		skus = append(skus, orders.SKUs(h.Items)...)
	}
	slices.Sort(skus)
	skus = slices.Compact(skus)
	ended, err := s.end(ctx, skus, orders.Ending{Expire: &orders.Expiry{HoldIDs: ids, Leader: l}})
	n := ended.Expired
	if n > 0 {
		s.obs.HoldsExpired(n)
	}
	return n, err
}

// bySKUSet groups holds (in expiry order) by the set of SKUs they hold, the
// sets in the order of their earliest hold.
func bySKUSet(holds []orders.Reservation) [][]orders.Reservation {
	var out [][]orders.Reservation
	index := map[string]int{}
	for _, h := range holds {
		key := strings.Join(orders.SKUs(h.Items), "\x00")
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], h)
	}
	return out
}

// Purge deletes the idempotency records older than the retention, in bounded
// rounds, under the sweeper's lease, and returns how many it deleted.
func (s *Service) Purge(ctx context.Context, l orders.Leader) (int, error) {
	cutoff := s.now().Add(-s.cfg.Retention)
	total := 0
	for range purgeRounds {
		n, err := s.store.PurgeRecords(ctx, cutoff, purgeRound, l)
		total += n
		if err != nil || n < purgeRound {
			return total, err
		}
	}
	return total, nil
}

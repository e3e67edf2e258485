package service

import (
	"context"
	"errors"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The strategies that take no lock.

// dbAtomic is db-atomic: the guarded decrement alone, one transaction an order.
type dbAtomic struct{ s *Service }

func (a dbAtomic) place(ctx context.Context, p orders.Placement) result {
	if r, done := a.s.recorded(ctx, p.Keyed()); done {
		return r
	}
	return a.s.commitOne(ctx, p, nil)
}

// redisAtomic is redis-atomic: a Lua check-and-decrement in Redis, then the
// database write. The database stays the guard: a counter that says yes wrongly
// (Redis restarted, a write of unknown outcome) only costs a refused commit,
// after which the counter is dropped and seeded again from the database.
type redisAtomic struct{ s *Service }

func (a redisAtomic) place(ctx context.Context, p orders.Placement) result {
	s := a.s
	if r, done := s.recorded(ctx, p.Keyed()); done {
		return r
	}
	skus := orders.SKUs(p.Order.Items)
	short, err := s.take(ctx, p.Order.Items)
	if err != nil {
		// The script may have run: the counters are dropped, to be seeded again.
		s.log.WarnContext(ctx, "the counters' decrement in Redis failed; the database decides alone", "err", err)
		s.dropCounters(ctx, skus)
		return s.commitOne(ctx, p, nil)
	}
	if len(short) > 0 {
		// Refuse on the database's word: a counter may have drifted low.
		have, err := s.store.Available(ctx, skus)
		if err != nil {
			return result{err: err}
		}
		refusal := orders.Shortage(p.Order.Items, have)
		if refusal == nil {
			s.dropCounters(ctx, skus)
			return s.commitOne(ctx, p, nil)
		}
		return s.refuse(ctx, p, refusal)
	}
	r := s.commitOne(ctx, p, nil)
	if r.placed == nil {
		// Taken from the counters, but not placed by this request (refused, failed, or a replay
		// of the same key's first request): the counters are off by this order.
		s.dropCounters(ctx, skus)
	}
	return r
}

// take runs the Lua gate, seeding missing counters from the database once.
func (s *Service) take(ctx context.Context, items []orders.Item) ([]string, error) {
	for range 2 {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		missing, short, err := s.counters.Take(rctx, items)
		cancel()
		if err != nil || len(missing) == 0 {
			return short, err
		}
		available, err := s.store.Available(ctx, missing)
		if err != nil {
			return nil, err
		}
		for _, sku := range missing {
			if _, ok := available[sku]; !ok {
				available[sku] = 0 // an unknown SKU: nothing to sell
			}
		}
		rctx, cancel = context.WithTimeout(ctx, s.cfg.OpTimeout)
		err = s.counters.Seed(rctx, available)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("redis-atomic's counters vanished twice")
}

// unsafeRMW is unsafe, the control group: read the stock, wait, write back what
// was read minus the order, with no lock and no guard. Two buyers who read the
// same stock both succeed. The wait (Config.UnsafeWindow) widens the window
// between the read and the write on purpose, so that the demo shows the
// oversell every time instead of when the race happens to be won.
type unsafeRMW struct{ s *Service }

func (u unsafeRMW) place(ctx context.Context, p orders.Placement) result {
	s := u.s
	if r, done := s.recorded(ctx, p.Keyed()); done {
		return r
	}
	have, err := s.store.Available(ctx, orders.SKUs(p.Order.Items))
	if err != nil {
		return result{err: err}
	}
	if refusal := orders.Shortage(p.Order.Items, have); refusal != nil {
		return s.refuse(ctx, p, refusal)
	}
	t := time.NewTimer(s.cfg.UnsafeWindow)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return result{err: context.Cause(ctx)}
	}
	err = s.store.CommitUnguarded(ctx, p, have)
	if isCapped(err) { // the caps' counters are guarded by the database, even here
		return result{err: s.capRefusal(ctx, p, err)}
	}
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, done := s.recorded(ctx, p.Keyed()); done {
			return r
		}
	}
	if err != nil {
		return result{err: err}
	}
	return result{placed: &p.Order}
}

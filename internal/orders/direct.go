package orders

import (
	"context"
	"errors"
)

// result is the answer to one placement: the order placed, an outcome to
// replay, or an error.
type result struct {
	placed *Order
	replay *Outcome
	err    error
}

// placeDirect is the order path of the strategies that write the idempotency
// record in the order's transaction (lock-batch, db-atomic, redis-atomic).
func (s *Service) placeDirect(ctx context.Context, p Placement) (Placed, error) {
	var r result
	switch s.cfg.Strategy {
	case StrategyLockBatch:
		r = s.placeBatched(ctx, p)
	case StrategyRedisAtomic:
		r = s.placeReserved(ctx, p)
	default:
		r = s.placeAtomic(ctx, p)
	}
	switch {
	case r.err != nil:
		s.obs.OrderRefused(reason(r.err))
		return Placed{}, r.err
	case r.replay != nil:
		return s.replay(ctx, *r.replay)
	}
	s.obs.OrderPlaced()
	return Placed{Order: *r.placed}, nil
}

// placeAtomic is db-atomic: the guarded decrement alone, one transaction.
func (s *Service) placeAtomic(ctx context.Context, p Placement) result {
	if r, done := s.recorded(ctx, p); done {
		return r
	}
	return s.commitOne(ctx, p, nil)
}

// placeReserved is redis-atomic: a Lua check-and-decrement in Redis, then the
// database write. The database stays the guard: a counter that says yes wrongly
// (Redis restarted, a write of unknown outcome) only costs a refused commit, after
// which the counter is dropped and seeded again from the database.
func (s *Service) placeReserved(ctx context.Context, p Placement) result {
	if r, done := s.recorded(ctx, p); done {
		return r
	}
	skus := SKUs(p.Order.Items)
	short, err := s.reserve(ctx, p.Order.Items)
	if err != nil {
		// The script may have run: the counters are dropped, to be seeded again.
		s.log.WarnContext(ctx, "reservation in Redis failed; the database decides alone", "err", err)
		s.dropReservations(ctx, skus)
		return s.commitOne(ctx, p, nil)
	}
	if len(short) > 0 {
		// Refuse on the database's word: a counter may have drifted low.
		have, err := s.store.Available(ctx, skus)
		if err != nil {
			return result{err: err}
		}
		if len(shortOf(p.Order.Items, have)) == 0 {
			s.dropReservations(ctx, skus)
			return s.commitOne(ctx, p, nil)
		}
		return s.refuse(ctx, p, short)
	}
	r := s.commitOne(ctx, p, nil)
	if r.placed == nil {
		// Reserved, but not placed by this request (refused, failed, or a replay
		// of the same key's first request): the counters are off by this order.
		s.dropReservations(ctx, skus)
	}
	return r
}

// reserve runs the Lua gate, seeding missing counters from the database once.
func (s *Service) reserve(ctx context.Context, items []Item) ([]string, error) {
	for range 2 {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		missing, short, err := s.reserver.Reserve(rctx, items)
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
		err = s.reserver.Seed(rctx, available)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("reservation counters vanished twice")
}

// recorded answers a placement whose key has a record already: a replay, a
// mismatch, or a request still running under the old claim path.
func (s *Service) recorded(ctx context.Context, p Placement) (result, bool) {
	if p.Key == "" {
		return result{}, false
	}
	recs, err := s.store.Outcomes(ctx, []string{p.Key})
	if err != nil {
		return result{err: err}, true
	}
	rec, ok := recs[p.Key]
	if !ok || s.staleClaim(ctx, p.Key, rec) {
		return result{}, false
	}
	return resolve(rec, p.Hash), true
}

// staleClaim drops a claim left running by the claim path (lock, lock-polling,
// unsafe) longer than any request could run, its replica crashed, say, and
// reports whether it did: the key is free again.
func (s *Service) staleClaim(ctx context.Context, key string, rec Record) bool {
	if rec.Done || s.now().Sub(rec.UpdatedAt) < s.cfg.IdempotencyStale {
		return false
	}
	if err := s.store.ReleaseIdempotency(context.WithoutCancel(ctx), key, rec.Claim); err != nil {
		s.log.ErrorContext(ctx, "stale idempotency claim not dropped", "key", key, "err", err)
		return false
	}
	return true
}

func resolve(rec Record, hash string) result {
	switch {
	case rec.Hash != hash:
		return result{err: ErrIdempotencyMismatch}
	case !rec.Done:
		return result{err: ErrIdempotencyRunning}
	}
	out := rec.Outcome
	return result{replay: &out}
}

// commitOne places one order in its own transaction, records its refusal when
// the stock is short, and replays the record when its key was written meanwhile.
func (s *Service) commitOne(ctx context.Context, p Placement, fences Fences) result {
	_, err := s.store.Commit(ctx, Batch{Placed: []Placement{p}}, fences)
	var short *InsufficientStockError
	switch {
	case err == nil:
		return result{placed: &p.Order}
	case errors.As(err, &short):
		return s.refuse(ctx, p, short.SKUs)
	case errors.Is(err, ErrIdempotencyRunning): // the same key, committed by another request
		if r, done := s.recorded(ctx, p); done {
			return r
		}
	}
	return result{err: err}
}

// refuse answers a refusal, recording it under the key for replay.
func (s *Service) refuse(ctx context.Context, p Placement, short []string) result {
	refusal := &InsufficientStockError{SKUs: short}
	if p.Key == "" {
		return result{err: refusal}
	}
	p.Short = short
	_, err := s.store.Commit(context.WithoutCancel(ctx), Batch{Refused: []Placement{p}}, nil)
	if errors.Is(err, ErrIdempotencyRunning) {
		if r, done := s.recorded(ctx, p); done {
			return r
		}
	}
	if err != nil && !errors.Is(err, ErrIdempotencyRunning) {
		s.log.ErrorContext(ctx, "refusal not recorded under its idempotency key", "key", p.Key, "err", err)
	}
	return result{err: refusal}
}

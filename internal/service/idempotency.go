package service

import (
	"context"
	"errors"

	"github.com/stockguard/stockguard/internal/orders"
)

// One idempotency protocol for every strategy: a key's record is written in the
// transaction of the order it made (or of the refusal it replays), never before,
// so no record ever says "still running", whatever crashed. Two requests with one
// key may both run; the second to commit fails on the record's primary key,
// rolls back whole, and replays the first. A record is kept for the retention;
// after it the key is new again.

// dedupe answers the placements whose key has a record (replays, mismatches) and
// those that repeat the key of an earlier one in ps (answered like it, once it
// is), and returns the indexes of the rest.
func (s *Service) dedupe(ctx context.Context, ps []orders.Placement, rs []result) (live []int, dupOf map[int]int, err error) {
	var keys []string
	first := map[string]int{}
	dupOf = map[int]int{}
	for i, p := range ps {
		if p.Key == "" {
			continue
		}
		if j, ok := first[p.Key]; ok {
			dupOf[i] = j
			continue
		}
		first[p.Key] = i
		keys = append(keys, p.Key)
	}
	recs, err := s.records(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	for i, p := range ps {
		if _, dup := dupOf[i]; dup {
			continue
		}
		if rec, ok := recs[p.Key]; ok && p.Key != "" {
			rs[i] = resolve(rec, p.Hash)
			continue
		}
		live = append(live, i)
	}
	return live, dupOf, nil
}

// records reads the records of keys that are within the retention; older ones
// are deleted, so that their keys are new again.
func (s *Service) records(ctx context.Context, keys []string) (map[string]orders.Record, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	recs, err := s.store.Outcomes(ctx, keys)
	if err != nil {
		return nil, err
	}
	cutoff := s.now().Add(-s.cfg.Retention)
	var old []string
	for k, r := range recs {
		if r.CreatedAt.Before(cutoff) {
			old = append(old, k)
			delete(recs, k)
		}
	}
	if len(old) > 0 {
		if err := s.store.Forget(ctx, old, cutoff); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// recorded answers a request whose key has a record: a replay or a mismatch.
func (s *Service) recorded(ctx context.Context, k orders.Keyed) (result, bool) {
	if k.Key == "" {
		return result{}, false
	}
	recs, err := s.records(ctx, []string{k.Key})
	if err != nil {
		return result{err: err}, true
	}
	rec, ok := recs[k.Key]
	if !ok {
		return result{}, false
	}
	return resolve(rec, k.Hash), true
}

func resolve(rec orders.Record, hash string) result {
	if rec.Hash != hash {
		return result{err: orders.ErrIdempotencyMismatch}
	}
	out := rec.Outcome
	return result{replay: &out}
}

// replayOf is the answer to a placement that repeated the key of first, one in
// the same batch: what a retry would have been told.
func replayOf(r result, hash string, first orders.Placement) result {
	switch {
	case hash != first.Hash:
		return result{err: orders.ErrIdempotencyMismatch}
	case r.placed != nil && first.Hold != nil:
		return result{replay: &orders.Outcome{ReservationID: r.placed.ID}}
	case r.placed != nil:
		return result{replay: &orders.Outcome{OrderID: r.placed.ID}}
	}
	return r
}

// commitOne places one order in its own transaction, guarded by the database
// alone (and the grant's tokens, if any), records its refusal when the stock is
// short, and replays the record when its key was written meanwhile.
func (s *Service) commitOne(ctx context.Context, p orders.Placement, g orders.Grant) result {
	err := s.fenced(ctx, g, func(fences orders.Fences) error {
		_, err := s.store.Commit(ctx, orders.Batch{Placed: []orders.Placement{p}}, fences)
		return err
	})
	var short *orders.InsufficientStockError
	switch {
	case err == nil:
		return result{placed: &p.Order}
	case errors.As(err, &short):
		return s.refuse(ctx, p, short)
	case errors.Is(err, orders.ErrIdempotencyConflict):
		if r, done := s.recorded(ctx, p.Keyed()); done {
			return r
		}
	}
	return result{err: err}
}

// refuse answers a refusal, recording it under the key for replay.
func (s *Service) refuse(ctx context.Context, p orders.Placement, refusal *orders.InsufficientStockError) result {
	if p.Key == "" {
		return result{err: refusal}
	}
	p.Short = refusal.SKUs
	_, err := s.store.Commit(context.WithoutCancel(ctx), orders.Batch{Refused: []orders.Placement{p}}, nil)
	if errors.Is(err, orders.ErrIdempotencyConflict) {
		if r, done := s.recorded(ctx, p.Keyed()); done {
			return r
		}
	}
	if err != nil {
		s.log.ErrorContext(ctx, "refusal not recorded under its idempotency key", "key", p.Key, "err", err)
	}
	return result{err: refusal}
}

package service

import (
	"context"
	"errors"

	"github.com/stockguard/stockguard/internal/orders"
)

// Endings: a confirm, a release and the sweeper's expiry end holds, and
// change stock as a cancel does, under the locks of the holds' SKUs, fenced.
// On lock-batch they join the orders' queue: one grant for the batch, one
// transaction for its endings, each decided on its own (a confirm of a hold
// that expired is refused while the others beside it commit). Taken one by
// one, a hot SKU's confirms each waited for the lock and committed alone: 0.08×
// the orders' rate, and a burst of them timed out in the lock wait.

// end ends holds under the locks of skus: on lock-batch's queue, beside the
// orders, else alone. The ending's own refusal is the error.
func (s *Service) end(ctx context.Context, skus []string, e orders.Ending) (orders.Ended, error) {
	if lb, ok := s.placer.(lockBatch); ok {
		return lb.do(ctx, change{end: &e, skus: skus}).ending()
	}
	var out orders.Ended
	err := s.writeLocked(ctx, skus, func(ctx context.Context, fences orders.Fences) (map[string]int64, error) {
		ends, after, err := s.store.End(ctx, []orders.Ending{e}, fences)
		if err != nil {
			return nil, err
		}
		out = ends[0]
		return after, out.Err
	})
	return out, err
}

// ending is the answer to one ending: the store's, or the refusal.
func (r result) ending() (orders.Ended, error) {
	switch {
	case r.err != nil:
		return orders.Ended{}, r.err
	case r.ended == nil:
		return orders.Ended{}, errors.New("batch: no answer for an ending") // a bug, answered rather than hidden
	}
	return *r.ended, r.ended.Err
}

// keyOf is an ending's idempotency key and hash (none for an expiry).
func keyOf(e orders.Ending) orders.Keyed {
	switch {
	case e.Confirm != nil:
		return orders.Keyed{Key: e.Confirm.Key, Hash: e.Confirm.Hash}
	case e.Release != nil:
		return e.Release.Keyed
	}
	return orders.Keyed{}
}

// endHolds answers a batch's endings under the batch's grant: those whose key
// has a record from their replay (one read for the batch), the others written
// in one transaction, then the cache set to what it returned. A key another
// request recorded meanwhile fails the transaction whole: the endings are then
// written one by one, so that only that one is refused.
func (s *Service) endHolds(ctx context.Context, es []orders.Ending, skus []string, g orders.Grant) []result {
	rs := make([]result, len(es))
	var keys []string
	for _, e := range es {
		if k := keyOf(e); k.Key != "" {
			keys = append(keys, k.Key)
		}
	}
	recs, err := s.records(ctx, keys)
	if err != nil {
		for i := range rs {
			rs[i] = result{err: err}
		}
		return rs
	}
	var live []int
	var les []orders.Ending
	for i, e := range es {
		if k := keyOf(e); k.Key != "" {
			if rec, ok := recs[k.Key]; ok {
				rs[i] = resolve(rec, k.Hash)
				continue
			}
		}
		live, les = append(live, i), append(les, e)
	}
	if len(les) == 0 {
		return rs
	}
	var out []orders.Ended
	var after map[string]int64
	err = s.fenced(ctx, g, func(f orders.Fences) error {
		var err error
		out, after, err = s.store.End(ctx, les, f)
		return err
	})
	switch {
	case err == nil:
		s.setCache(ctx, after, g.Fences())
		s.dropCounters(ctx, skus)
		for k, i := range live {
			rs[i] = result{ended: &out[k]}
		}
		return rs
	case errors.Is(err, orders.ErrIdempotencyConflict) && len(les) > 1:
		for _, i := range live {
			rs[i] = s.endHolds(ctx, es[i:i+1], skus, g)[0]
		}
		return rs
	}
	s.afterFailure(ctx, skus, err)
	for _, i := range live {
		rs[i] = result{err: err}
	}
	return rs
}

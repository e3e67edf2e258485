package service

import (
	"context"
	"errors"

	"github.com/stockguard/stockguard/internal/orders"
)

// Endings: a confirm, a release and the sweeper's expiry end holds, and
// change stock as a cancel does, under the locks of the holds' SKUs, fenced.
// On lock-batch they join the orders' queue: one grant for the batch, and one
// transaction for its orders, holds and endings together (Store.CommitChanges,
// serve in locked.go), each ending decided on its own (a confirm of a hold
// that expired is refused while the others beside it commit). Taken one by
// one, a hot SKU's confirms each waited for the lock and committed alone: 0.08×
// the orders' rate, and a burst of them timed out in the lock wait; in a
// transaction of their own beside the orders', 0.58×.

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

// endingSet is a batch's endings on their way through serve: each one's
// answer, and those still to write (live: not answered from their key's
// record, not written yet).
type endingSet struct {
	es   []orders.Ending
	skus []string // theirs, sorted
	rs   []result
	live []int
}

func newEndingSet(es []orders.Ending, skus []string) *endingSet {
	return &endingSet{es: es, skus: skus, rs: make([]result, len(es))}
}

// keys are the endings' idempotency keys.
func (e *endingSet) keys() []string {
	var keys []string
	for _, x := range e.es {
		if k := keyOf(x); k.Key != "" {
			keys = append(keys, k.Key)
		}
	}
	return keys
}

// replay answers the endings whose key has a record in recs, and makes the
// others live.
func (e *endingSet) replay(recs map[string]orders.Record) {
	e.live = e.live[:0]
	for i, x := range e.es {
		if k := keyOf(x); k.Key != "" {
			if rec, ok := recs[k.Key]; ok {
				e.rs[i] = resolve(rec, k.Hash)
				continue
			}
		}
		e.live = append(e.live, i)
	}
}

// pending says whether some endings are still to write.
func (e *endingSet) pending() bool { return len(e.live) > 0 }

// liveEndings are the endings still to write, in order.
func (e *endingSet) liveEndings() []orders.Ending {
	out := make([]orders.Ending, len(e.live))
	for k, i := range e.live {
		out[k] = e.es[i]
	}
	return out
}

// written answers the live endings with the store's answers, in order.
func (e *endingSet) written(out []orders.Ended) {
	for k, i := range e.live {
		e.rs[i] = result{ended: &out[k]}
	}
	e.live = nil
}

// fail answers the live endings with err.
func (e *endingSet) fail(err error) {
	for _, i := range e.live {
		e.rs[i] = result{err: err}
	}
	e.live = nil
}

// endHolds answers endings alone under a grant: those whose key has a record
// from their replay (one read), the others written in one transaction
// (endLive).
func (s *Service) endHolds(ctx context.Context, es []orders.Ending, skus []string, g orders.Grant) []result {
	e := newEndingSet(es, skus)
	recs, err := s.records(ctx, e.keys())
	if err != nil {
		e.replay(nil) // every one live, to be told
		e.fail(err)
		return e.rs
	}
	e.replay(recs)
	s.endLive(ctx, e, g)
	return e.rs
}

// endLive writes the live endings of e in one transaction (Store.End), then
// sets the cache to what it returned: a batch's endings with no placement
// beside them, or left by one whose placements were written one by one. A key
// another request recorded meanwhile fails the transaction whole: the
// endings are then written one by one, so that only that one is refused.
func (s *Service) endLive(ctx context.Context, e *endingSet, g orders.Grant) {
	if !e.pending() {
		return
	}
	var out []orders.Ended
	var after map[string]int64
	err := s.fenced(ctx, g, func(f orders.Fences) error {
		var err error
		out, after, err = s.store.End(ctx, e.liveEndings(), f)
		return err
	})
	switch {
	case err == nil:
		s.setCache(ctx, after, g.Fences())
		s.dropCounters(ctx, e.skus)
		e.written(out)
		return
	case errors.Is(err, orders.ErrIdempotencyConflict) && len(e.live) > 1:
		for _, i := range e.live {
			e.rs[i] = s.endHolds(ctx, e.es[i:i+1], e.skus, g)[0]
		}
		e.live = nil
		return
	}
	s.afterFailure(ctx, e.skus, err)
	e.fail(err)
}

package orders

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
)

// lock-batch: the orders for one SKU set that queue on a replica while its lock
// is held elsewhere are served together, in one critical section and one
// database transaction. The first order to find no queue leads: it takes the
// locks, and once it holds them takes every order queued by then (up to
// MaxBatch), decides each against the stock in arrival order, commits them all,
// and answers each on its own. It leads again while orders are queued.
//
// Each order stays all-or-nothing with its own answer and its own ledger
// entries: a batch decides orders one by one against the stock left by those
// before it, and commits with one guarded decrement by the total, so the
// database refuses the batch whole rather than sell what is not there.

type batcher struct {
	mu     sync.Mutex
	queues map[string]*batchQueue
}

type batchQueue struct {
	skus    []string
	waiting []*pending
}

type pending struct {
	ctx  context.Context
	p    Placement
	done chan result // buffered: the leader never waits for a caller that left
	// Under batcher.mu: taken by a leader (its caller waits for the answer, which
	// may be a commit), or left by its caller before that (never taken).
	taken, left bool
}

// placeBatched queues p and waits for its answer or for ctx.
func (s *Service) placeBatched(ctx context.Context, p Placement) result {
	pd := &pending{ctx: ctx, p: p, done: make(chan result, 1)}
	skus := SKUs(p.Order.Items)
	key := strings.Join(skus, "\x00")
	s.batches.mu.Lock()
	q, queued := s.batches.queues[key]
	if !queued {
		q = &batchQueue{skus: skus}
		s.batches.queues[key] = q
	}
	q.waiting = append(q.waiting, pd)
	if s.onQueued != nil {
		s.onQueued(len(q.waiting))
	}
	s.batches.mu.Unlock()
	if !queued {
		go s.lead(key, q) //nolint:contextcheck // the batch outlives the order that started it
	}
	select {
	case r := <-pd.done:
		return r
	case <-ctx.Done():
	}
	s.batches.mu.Lock()
	taken := pd.taken
	pd.left = !taken
	s.batches.mu.Unlock()
	if taken {
		// Its batch may be committing it: the answer says what happened, and it
		// comes within the batch's own deadline.
		return <-pd.done
	}
	return result{err: fmt.Errorf("waiting for a batch: %w", context.Cause(ctx))}
}

// lead serves q's batches until it is empty.
func (s *Service) lead(key string, q *batchQueue) {
	for {
		s.leadOnce(q)
		s.batches.mu.Lock()
		if len(q.waiting) == 0 {
			delete(s.batches.queues, key)
			s.batches.mu.Unlock()
			return
		}
		s.batches.mu.Unlock()
	}
}

// leadOnce takes the locks, then serves the orders queued by then. A panic is
// answered as an error to every order taken, rather than take the replica down.
func (s *Service) leadOnce(q *batchQueue) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.BatchTimeout)
	defer cancel()
	var taken []*pending
	var results []result
	answered := false
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lock-batch: a batch panicked", "panic", p)
			if !answered {
				for _, pd := range taken {
					pd.done <- result{err: fmt.Errorf("batch failed: %v", p)}
				}
			}
		}
	}()
	err := s.locker.WithLocks(ctx, q.skus, func(ctx context.Context, fences Fences) error {
		taken = s.batches.take(q, s.cfg.MaxBatch)
		if len(taken) == 0 {
			return nil
		}
		results = s.placeBatch(ctx, taken, fences)
		return context.Cause(ctx) // a lease lost meanwhile, for WithLocks to name
	})
	if err != nil && taken == nil { // the locks were not had: everyone queued waited that long
		taken = s.batches.take(q, math.MaxInt)
	}
	answered = true
	for i, pd := range taken {
		switch {
		case results == nil:
			pd.done <- result{err: err}
		case err != nil && errors.Is(results[i].err, context.Canceled), err != nil && errors.Is(results[i].err, context.DeadlineExceeded):
			pd.done <- result{err: err} // the batch's context ended: say why (a lost lease, say), not "cancelled"
		default: // what was committed, or why not
			pd.done <- results[i]
		}
	}
}

// take removes up to n orders from q whose callers still wait, marking them taken.
func (b *batcher) take(q *batchQueue, n int) []*pending {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*pending
	i := 0
	for ; i < len(q.waiting) && len(out) < n; i++ {
		if pd := q.waiting[i]; !pd.left && pd.ctx.Err() == nil {
			pd.taken = true
			out = append(out, pd)
		}
	}
	q.waiting = slices.Clone(q.waiting[i:]) // not the taken ones' backing array
	return out
}

// placeBatch decides and commits one batch under its locks, and returns each
// order's answer.
func (s *Service) placeBatch(ctx context.Context, taken []*pending, fences Fences) []result {
	results := make([]result, len(taken))
	fill := func(err error) []result {
		for i := range results {
			if results[i] == (result{}) {
				results[i] = result{err: err}
			}
		}
		return results
	}
	live, dupOf, err := s.dedupe(ctx, taken, results)
	if err != nil {
		return fill(err)
	}
	skus := SKUs(taken[0].p.Order.Items)
	available, loaded, err := s.available(ctx, skus)
	if err != nil {
		return fill(err)
	}
	fromDB := len(loaded) == len(skus)
	reload := func() error { // the database's numbers, counting what the cache had wrong
		fresh, err := s.store.Available(ctx, skus)
		if err != nil {
			return err
		}
		s.repaired(available, fresh)
		available, loaded, fromDB = fresh, fresh, true
		return nil
	}
	var failed error
	for attempt := 0; ; attempt++ {
		d := decide(taken, live, available)
		if len(d.short) > 0 && !fromDB { // refuse on the database's word, not the cache's
			if err := reload(); err != nil {
				return fill(err)
			}
			d = decide(taken, live, available)
		}
		var after map[string]int64
		var err error
		if b := batchOf(taken, d); len(b.Placed)+len(b.Refused) > 0 {
			after, err = s.store.Commit(ctx, b, fences)
		}
		if err == nil {
			if len(d.placed) == 0 {
				after = loaded // nothing written: cache what was read
			}
			s.setCache(ctx, after, fences)
			for _, i := range d.placed {
				results[i] = result{placed: &taken[i].p.Order}
			}
			for i, short := range d.short {
				results[i] = result{err: &InsufficientStockError{SKUs: short}}
			}
			break
		}
		if errors.Is(err, ErrInsufficientStock) && attempt == 0 { // the cache was wrong: decide again on the database's numbers
			if err = reload(); err == nil {
				continue
			}
		}
		s.afterRefusal(ctx, skus, fences, available, err)
		if errors.Is(err, ErrIdempotencyRunning) { // a key recorded by another request meanwhile: one by one
			for _, i := range live {
				results[i] = s.commitOne(ctx, taken[i].p, fences)
			}
			s.deleteCache(ctx, skus)
			break
		}
		failed = err
		break
	}
	for i, j := range dupOf {
		results[i] = replayOf(results[j], taken[i].p.Hash, taken[j].p.Hash)
	}
	if failed == nil {
		failed = errors.New("batch: no answer for an order") // a bug, answered rather than hidden
	}
	return fill(failed)
}

// dedupe answers the orders whose key has a record (replays, mismatches) and
// those that repeat a key of an earlier order in the batch (answered like it
// once it is), and returns the indexes of the rest.
func (s *Service) dedupe(ctx context.Context, taken []*pending, results []result) (live []int, dupOf map[int]int, err error) {
	var keys []string
	first := map[string]int{}
	dupOf = map[int]int{}
	for i, pd := range taken {
		if pd.p.Key == "" {
			continue
		}
		if j, ok := first[pd.p.Key]; ok {
			dupOf[i] = j
			continue
		}
		first[pd.p.Key] = i
		keys = append(keys, pd.p.Key)
	}
	var recs map[string]Record
	if len(keys) > 0 {
		if recs, err = s.store.Outcomes(ctx, keys); err != nil {
			return nil, nil, err
		}
	}
	for i, pd := range taken {
		if _, dup := dupOf[i]; dup {
			continue
		}
		if rec, ok := recs[pd.p.Key]; ok && pd.p.Key != "" && !s.staleClaim(ctx, pd.p.Key, rec) {
			results[i] = resolve(rec, pd.p.Hash)
			continue
		}
		live = append(live, i)
	}
	return live, dupOf, nil
}

// decision is which orders of a batch go through, and what the others lacked.
type decision struct {
	placed []int
	short  map[int][]string
}

// decide takes the live orders in arrival order against available.
func decide(taken []*pending, live []int, available map[string]int64) decision {
	left := make(map[string]int64, len(available))
	for k, v := range available {
		left[k] = v
	}
	d := decision{short: map[int][]string{}}
	for _, i := range live {
		items := taken[i].p.Order.Items
		if short := shortOf(items, left); len(short) > 0 {
			d.short[i] = short
			continue
		}
		for _, it := range items {
			left[it.SKU] -= int64(it.Quantity)
		}
		d.placed = append(d.placed, i)
	}
	return d
}

func batchOf(taken []*pending, d decision) Batch {
	var b Batch
	for _, i := range d.placed {
		b.Placed = append(b.Placed, taken[i].p)
	}
	for i, short := range d.short {
		if p := taken[i].p; p.Key != "" {
			p.Short = short
			b.Refused = append(b.Refused, p)
		}
	}
	return b
}

// replayOf is the answer to an order that repeated the key of one in the same
// batch: what a retry would have been told.
func replayOf(r result, hash, firstHash string) result {
	switch {
	case hash != firstHash:
		return result{err: ErrIdempotencyMismatch}
	case r.placed != nil:
		return result{replay: &Outcome{OrderID: r.placed.ID}}
	}
	return r
}

// repaired counts the cached values the database contradicts.
func (s *Service) repaired(cached, fresh map[string]int64) {
	for sku, v := range fresh {
		if c, ok := cached[sku]; ok && c != v {
			s.obs.CacheRepaired(sku)
		}
	}
}

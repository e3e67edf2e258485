package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/stockguard/stockguard/internal/batch"
	"github.com/stockguard/stockguard/internal/orders"
)

// The strategies that hold the per-SKU locks: lock and lock-polling serve one
// order per critical section; lock-batch serves, in one critical section and
// one transaction, every order that queued on this replica while its previous
// batch ran, whatever their SKUs. All three decide, commit and repair the same
// way (serve).

// lockEach is lock and lock-polling: one order per critical section, in the
// caller's goroutine.
type lockEach struct{ s *Service }

func (l lockEach) place(ctx context.Context, p orders.Placement) result {
	rs, err := l.s.locked(ctx, orders.SKUs(p.Order.Items), func() []change { return []change{{p: p}} })
	if err != nil {
		return result{err: err}
	}
	return rs[0]
}

// lockBatch is lock-batch: every order of the replica joins one queue (package
// batch), and its leader serves them under the locks of the union of their SKUs.
//
// One queue rather than one per SKU set: on many SKUs and multi-SKU orders few
// orders share a set, and per-set queues held one order each, a lock round and
// a transaction per order. With one queue the batch is the replica's backlog,
// whatever it orders, and the lock round and the commit are paid once for it.
// The leader peeks at the orders waiting, locks every SKU they name (sorted,
// all or none: pkg/lock), then takes those orders and the ones that arrived
// meanwhile whose SKUs it holds; the others stay first in line for the next
// batch. Across replicas the batches' SKU sets overlap, and their critical
// sections take turns as one hot SKU's do.
//
// Tried and dropped: a turn lock that the replicas' leaders took before they
// peeked, so that a batch would also hold what arrived during the wait. The
// batches were whole backlogs, but a lock's turns go to whichever waiter's try
// lands first, and a replica lost the race for turns in a row: on multi-SKU
// orders at 256 VUs its orders waited past the lock wait (503 busy).
type lockBatch struct {
	s *Service
	q *batch.Queue[change, result]
}

// change is one item of lock-batch's queue: an order or a hold to place (p),
// or a hold to end (end: a confirm, a release, the sweeper's expiry) under the
// locks of skus. A batch serves every kind under one grant and in one
// transaction (Store.CommitChanges), each decided on its own.
type change struct {
	p    orders.Placement
	end  *orders.Ending
	skus []string // end's
	// hold is the hold a confirm or a release ends, whose SKUs (skus) the
	// batch's leader reads, for all its endings in one statement, before it
	// locks them.
	hold string
}

// skus is every SKU the change writes.
func (c change) skusOf() []string {
	if c.end != nil {
		return c.skus
	}
	return orders.SKUs(c.p.Order.Items)
}

// batchKey is the key of the replica's one queue.
const batchKey = "orders"

func newLockBatch(s *Service) lockBatch {
	lead := func(ctx context.Context, _ string, peek func() []change,
		take func(fit func(change) bool) []change,
	) ([]result, error) {
		return s.lockedBatch(ctx, peek, take)
	}
	q := batch.NewSelective(batch.Config{MaxBatch: s.cfg.MaxBatch, MaxQueue: s.cfg.MaxQueue, Timeout: s.cfg.BatchTimeout, Logger: s.log,
		OnQueue: func(_ string, n int) {
			if s.onQueued != nil {
				s.onQueued(n)
			}
		}}, lead)
	return lockBatch{s: s, q: q}
}

func (l lockBatch) place(ctx context.Context, p orders.Placement) result {
	return l.do(ctx, change{p: p})
}

// do queues c and waits for its answer.
func (l lockBatch) do(ctx context.Context, c change) result {
	r, err := l.q.Do(ctx, batchKey, c)
	switch {
	case errors.Is(err, batch.ErrFull), errors.Is(err, batch.ErrNoTime):
		return result{err: fmt.Errorf("%w: %w", orders.ErrOverloaded, err)}
	case err != nil:
		return result{err: fmt.Errorf("waiting for a batch: %w", err)}
	}
	return r
}

// lockedBatch serves a batch: it peeks at the changes waiting, locks the union
// of their SKUs, then takes those changes and the others it covers.
func (s *Service) lockedBatch(ctx context.Context, peek func() []change,
	take func(fit func(change) bool) []change,
) ([]result, error) {
	waiting := peek()
	var ids []string
	for _, c := range waiting {
		if c.hold != "" && c.skus == nil {
			ids = append(ids, c.hold)
		}
	}
	holds, err := s.store.Holds(ctx, ids)
	if err != nil {
		return nil, err // the locks were not had: every change waiting is told
	}
	skusOf := make(map[string][]string, len(ids)) // of each hold read: none for one not found
	for _, id := range ids {
		skusOf[id] = orders.SKUs(holds[id].Items)
	}
	// resolved fills in the SKUs of an ending read above (none for a hold not
	// found: the store refuses it), and says whether c's SKUs are known.
	resolved := func(c change) (change, bool) {
		if c.hold == "" || c.skus != nil {
			return c, true
		}
		skus, read := skusOf[c.hold] // not read: arrived after the peek, the next batch's
		c.skus = skus
		return c, read
	}
	var skus []string
	for _, c := range waiting {
		c, _ = resolved(c)
		skus = append(skus, c.skusOf()...)
	}
	slices.Sort(skus)
	skus = slices.Compact(skus)
	if len(skus) == 0 {
		// Every caller left before the lead, or those left end holds that do not
		// exist: nothing to lock, and nothing to end.
		cs := take(func(c change) bool { c, ok := resolved(c); return ok && c.end != nil && len(c.skusOf()) == 0 })
		rs := make([]result, len(cs))
		for i := range rs {
			rs[i] = result{ended: &orders.Ended{Err: fmt.Errorf("hold %s: %w", cs[i].hold, orders.ErrNotFound)}}
		}
		return rs, nil
	}
	held := make(map[string]bool, len(skus))
	for _, sku := range skus {
		held[sku] = true
	}
	return s.locked(ctx, skus, func() []change {
		cs := take(func(c change) bool {
			c, ok := resolved(c)
			return ok && coveredBy(c.skusOf(), held)
		})
		for i := range cs {
			cs[i], _ = resolved(cs[i])
		}
		return cs
	})
}

// unionSKUs is every SKU the placements name, sorted.
func unionSKUs(ps []orders.Placement) []string {
	var skus []string
	for _, p := range ps {
		for _, it := range p.Order.Items {
			skus = append(skus, it.SKU)
		}
	}
	slices.Sort(skus)
	return slices.Compact(skus)
}

// coveredBy says whether every SKU of skus is held.
func coveredBy(skus []string, held map[string]bool) bool {
	for _, sku := range skus {
		if !held[sku] {
			return false
		}
	}
	return true
}

// locked takes the locks of skus, then the changes to serve (take is called
// once, with the locks held), and serves them. A result cut short by the end of
// the critical section (a lost lease, say) gets the reason, not "cancelled";
// unless its outcome is unknown, which it stays.
func (s *Service) locked(ctx context.Context, skus []string, take func() []change) ([]result, error) {
	var rs []result
	err := s.locker.WithLocks(ctx, skus, func(ctx context.Context, g orders.Grant) error {
		if cs := take(); len(cs) > 0 {
			rs = s.serveChanges(ctx, cs, g)
		}
		return context.Cause(ctx) // a lease lost meanwhile, for WithLocks to name
	})
	if err == nil || rs == nil {
		return rs, err
	}
	for i := range rs {
		if errors.Is(rs[i].err, orders.ErrOutcomeUnknown) {
			continue // a COMMIT cut off by the lost lease may have committed: not a lease-lost "nothing done"
		}
		if errors.Is(rs[i].err, context.Canceled) || errors.Is(rs[i].err, context.DeadlineExceeded) {
			rs[i].err = err
		}
	}
	return rs, nil
}

// serveChanges serves a batch's changes under one grant: its placements and
// its endings, each decided on its own, committed in one transaction (serve).
func (s *Service) serveChanges(ctx context.Context, cs []change, g orders.Grant) []result {
	rs := make([]result, len(cs))
	var ps []orders.Placement
	var es []orders.Ending
	var pi, ei []int
	var skus []string
	for i, c := range cs {
		if c.end != nil {
			es, ei = append(es, *c.end), append(ei, i)
			skus = append(skus, c.skus...)
		} else {
			ps, pi = append(ps, c.p), append(pi, i)
		}
	}
	slices.Sort(skus)
	e := newEndingSet(es, slices.Compact(skus))
	for k, r := range s.serve(ctx, ps, e, g) {
		rs[pi[k]] = r
	}
	for k, r := range e.rs {
		rs[ei[k]] = r
	}
	return rs
}

// serve decides, commits and answers placements under the locks of their SKUs
// (their SKU sets may differ), and the endings e beside them: replays and
// repeated keys first (one read of the records for both kinds), then each
// order in arrival order against the stock left by those before it, then one
// commit of the placements and the endings, then the cache. Endings with no
// placement to commit beside them are written alone (endLive).
func (s *Service) serve(ctx context.Context, ps []orders.Placement, e *endingSet, g orders.Grant) []result {
	rs := make([]result, len(ps))
	live, dupOf, recs, err := s.dedupe(ctx, ps, rs, e.keys())
	e.replay(recs) // none when the read failed: every ending is then told why
	if err == nil && len(live) > 0 {
		err = s.decideAndCommit(ctx, ps, live, e, g, rs)
	}
	if err == nil {
		s.endLive(ctx, e, g) // those no placement's commit took with it
	} else {
		e.fail(err)
	}
	for i, j := range dupOf {
		rs[i] = replayOf(rs[j], ps[i].Hash, ps[j])
	}
	if err == nil {
		err = errors.New("batch: no answer for an order") // a bug, answered rather than hidden
	}
	for i := range rs {
		if rs[i] == (result{}) {
			rs[i] = result{err: err}
		}
	}
	return rs
}

// decideAndCommit decides the live placements against the stock, commits them
// with the endings of e still to write, and repairs the cache: the stock is
// read from the cache (the database for what it misses), and a refusal or a
// commit the database refuses is decided again on the database's numbers,
// never on the cache's word alone (I4). The endings are decided by the store,
// in each commit tried. When the placements are written one by one (a key
// recorded meanwhile, counters of the caps that moved), the endings are left
// to the caller.
func (s *Service) decideAndCommit(ctx context.Context, ps []orders.Placement, live []int, e *endingSet, g orders.Grant, rs []result) error {
	livePs := make([]orders.Placement, len(live))
	for k, i := range live {
		livePs[k] = ps[i]
	}
	skus := unionSKUs(livePs)
	st, err := s.readStock(ctx, skus)
	if err != nil {
		return err
	}
	caps, err := s.readCaps(ctx, ps, live) // I9: from the database, under the locks
	if err != nil {
		return err
	}
	d := decide(ps, live, st.available, st.limits, caps)
	if len(d.short) > 0 && !st.fromDB {
		if err := s.reload(ctx, &st); err != nil {
			return err
		}
		d = decide(ps, live, st.available, st.limits, caps)
	}
	after, err := s.commitAllocated(ctx, ps, &d, e, g)
	if errors.Is(err, orders.ErrInsufficientStock) && !st.fromDB { // the cache was wrong
		if err := s.reload(ctx, &st); err != nil {
			return err
		}
		d = decide(ps, live, st.available, st.limits, caps)
		after, err = s.commitAllocated(ctx, ps, &d, e, g)
	}
	if isCapped(err) {
		// The database refused a counter past its cap that the counters read
		// under the locks allowed: someone wrote them without our locks (a
		// lease lost, a strategy without locks). Decide again on both read
		// anew, once.
		if caps, err = s.readCaps(ctx, ps, live); err != nil {
			return err
		}
		if err := s.reload(ctx, &st); err != nil {
			return err
		}
		d = decide(ps, live, st.available, st.limits, caps)
		after, err = s.commitAllocated(ctx, ps, &d, e, g)
	}
	switch {
	case err == nil:
		s.setCache(ctx, merged(st.loaded, after), g.Fences())
		d.answer(ps, rs)
		return nil
	case errors.Is(err, orders.ErrIdempotencyConflict) || isCapped(err):
		// A key recorded by another request meanwhile, or counters that moved
		// again under us: one by one, each decided by the database alone.
		s.deleteCache(ctx, skus)
		for _, i := range live {
			rs[i] = s.commitOne(ctx, ps[i], g)
		}
		return nil
	case errors.Is(err, orders.ErrInsufficientStock):
		// Short on the database's own numbers, read under the locks: someone
		// wrote without them (a lease lost). The placements are told; the
		// endings, which take no stock, are left to be written alone.
		s.afterFailure(ctx, skus, err)
		for _, i := range live {
			rs[i] = result{err: err}
		}
		return nil
	}
	s.afterFailure(ctx, union(skus, e.skus), err)
	return err
}

// union is a and b's SKUs, sorted, once each.
func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// decision is which placements of a batch go through, and what the others
// lacked: stock (short), or room under a cap (capped); or what else refused
// them, not recorded under their keys (refused: a location that does not
// exist).
type decision struct {
	placed  []int
	short   map[int]*orders.InsufficientStockError
	capped  map[int]*orders.CapError
	refused map[int]error
}

// commitAllocated is commit, with the placements the store could not
// allocate over their SKUs' locations (a *PlacementError: the write failed
// whole) taken out of d, one at a time, and the rest written again: at most
// once per placement.
func (s *Service) commitAllocated(ctx context.Context, ps []orders.Placement, d *decision, e *endingSet, g orders.Grant) (map[string]int64, error) {
	for {
		after, err := s.commit(ctx, ps, *d, e, g)
		var pe *orders.PlacementError
		if !errors.As(err, &pe) || pe.Index < 0 || pe.Index >= len(d.placed) {
			return after, err
		}
		i := d.placed[pe.Index]
		d.placed = slices.Delete(slices.Clone(d.placed), pe.Index, pe.Index+1)
		var short *orders.InsufficientStockError
		if errors.As(pe.Err, &short) {
			d.short[i] = short
		} else {
			if d.refused == nil {
				d.refused = map[int]error{}
			}
			d.refused[i] = pe.Err
		}
	}
}

// decide takes the live placements in arrival order against available and,
// when caps is not nil, the caps' counters (I9): a placement that would take
// its caller past a cap is refused first, whatever the stock, and takes
// nothing.
func decide(ps []orders.Placement, live []int, available, limits map[string]int64, caps *capView) decision {
	left := make(map[string]int64, len(available))
	for k, v := range available {
		left[k] = v
	}
	var counted *capView // a copy, so that a decision taken again starts from the counters read
	if caps != nil {
		counted = &capView{caps: orders.Caps{Held: maps.Clone(caps.caps.Held), Units: maps.Clone(caps.caps.Units),
			MaxPerCustomer: caps.caps.MaxPerCustomer}, maxHeld: caps.maxHeld}
	}
	d := decision{short: map[int]*orders.InsufficientStockError{}, capped: map[int]*orders.CapError{}}
	for _, i := range live {
		items := ps[i].Order.Items
		if refusal := counted.refusal(ps[i]); refusal != nil {
			d.capped[i] = refusal
			continue
		}
		if short := orders.Shortage(items, left); short != nil && (ps[i].Hold != nil || !backordered(items, left, limits)) {
			d.short[i] = short
			continue
		}
		for _, it := range items {
			left[it.SKU] -= int64(it.Quantity)
		}
		counted.take(ps[i])
		d.placed = append(d.placed, i)
	}
	return d
}

// backordered says whether an order's items are covered once each SKU's
// backorder limit (limits: those of the SKUs that have one) is added to what
// is left: available may go below 0 by up to it. A hold never backorders.
func backordered(items []orders.Item, left, limits map[string]int64) bool {
	if len(limits) == 0 {
		return false
	}
	for _, it := range items {
		if left[it.SKU]+limits[it.SKU] < int64(it.Quantity) {
			return false
		}
	}
	return true
}

func (d decision) answer(ps []orders.Placement, rs []result) {
	for _, i := range d.placed {
		rs[i] = result{placed: &ps[i].Order}
	}
	for i, short := range d.short {
		rs[i] = result{err: short}
	}
	// A cap's refusal is not recorded under the key: a retry is decided anew,
	// once units have come back.
	for i, refusal := range d.capped {
		rs[i] = result{err: refusal}
	}
	for i, err := range d.refused {
		rs[i] = result{err: err}
	}
}

// commit writes a decision: the orders placed, and the refusals under their
// keys; and the endings of e still to write, in the same transaction
// (Store.CommitChanges), answered when it commits.
func (s *Service) commit(ctx context.Context, ps []orders.Placement, d decision, e *endingSet, g orders.Grant) (map[string]int64, error) {
	var b orders.Batch
	for _, i := range d.placed {
		b.Placed = append(b.Placed, ps[i])
	}
	defer func() { // where their units came from, set by the store
		for k, i := range d.placed {
			ps[i].Order.Allocations = b.Placed[k].Order.Allocations
		}
	}()
	for i, short := range d.short {
		if p := ps[i]; p.Key != "" {
			p.Short = short.SKUs
			b.Refused = append(b.Refused, p)
		}
	}
	if len(b.Placed)+len(b.Refused) == 0 && !e.pending() {
		return nil, nil
	}
	var after map[string]int64
	var out []orders.Ended
	err := s.fenced(ctx, g, func(fences orders.Fences) error {
		var err error
		if !e.pending() {
			after, err = s.store.Commit(ctx, b, fences)
			return err
		}
		out, after, err = s.store.CommitChanges(ctx, orders.Changes{Batch: b, Endings: e.liveEndings()}, fences)
		return err
	})
	if err == nil && e.pending() {
		e.written(out)
		s.dropCounters(ctx, e.skus)
	}
	return after, err
}

// merged is what the cache is to hold after a commit: the values the database
// gave after it, and those it gave before for the SKUs it did not write (read
// under the same locks, so still current).
func merged(loaded, after map[string]int64) map[string]int64 {
	if len(loaded) == 0 {
		return after
	}
	out := maps.Clone(loaded)
	maps.Copy(out, after)
	return out
}

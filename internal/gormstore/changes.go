package gormstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// A batch's changes, written in one transaction: its placements (orders,
// holds, and refusals recorded under their keys) and its endings (confirms,
// releases, expiries). Commit is this without endings, End this without
// placements; lock-batch's leader commits a batch with both kinds through
// CommitChanges, so that the batch pays one transaction, one guarded update
// per SKU and one INSERT per kind of row, not two of each.
//
// In order, in the transaction:
//
//  1. the database's time (when a hold is placed or ended), then every hold
//     the endings name, read and locked in id order, with their lines;
//  2. each ending decided on its own, in order (end.go): a refusal writes
//     nothing of it and leaves the others and the placements;
//  3. per SKU, in SKU order, one guarded, fenced update by the sum of the
//     placements' and the endings' changes; the placements are guarded
//     against the stock before the endings (they were decided on it, and an
//     ending never takes available), so a short total fails the write as it
//     fails Commit, and a stale fence fails it whole;
//  4. the events: the placements' first, then the endings', in their order,
//     each SKU's numbered on from its event_seq, which step 3 moved by their
//     number, then the stock levels the SKU's net change crossed, with one
//     more update of event_seq for a SKU that crossed one (events.go's
//     outbox);
//  5. the holds' ends, the caps' counters (the endings' lowered, then the
//     placements' raised under their caps), and the rows: ledger, orders,
//     lines, holds, their lines, records, one INSERT per kind.

// CommitChanges writes a batch's placements and endings in one transaction
// (see orders.Store).
func (s *Store) CommitChanges(ctx context.Context, c orders.Changes, fences orders.Fences) ([]orders.Ended, map[string]int64, error) {
	var out []orders.Ended
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		out, after, err = s.writeChanges(tx, c, fences)
		return err
	})
	if err != nil {
		return nil, nil, unavailable("commit changes", conflict(capped(err)))
	}
	return out, after, nil
}

// writeChanges is the transaction of CommitChanges, Commit and End: it
// returns one Ended per ending and the available stock after (nil when no
// SKU changed).
func (s *Store) writeChanges(tx *gorm.DB, c orders.Changes, fences orders.Fences) ([]orders.Ended, map[string]int64, error) {
	w, err := s.endings(tx, c.Batch, c.Endings, fences)
	if err != nil {
		return nil, nil, err
	}
	out, err := w.decide(c.Endings)
	if err != nil {
		return nil, nil, err
	}
	after, err := w.write(c.Placed)
	if err != nil {
		return nil, nil, err
	}
	for i := range out { // where a confirm's units were sold, known once written
		if o := &out[i].Order; o.ID != "" && out[i].Err == nil {
			o.Allocations = w.confirmed[o.ID]
		}
	}
	return out, after, nil
}

// skuChange is what a write changes of one SKU's counters: d, the sum of
// its placements' and endings' changes, of which take is what the placements
// take of available.
type skuChange struct {
	sku  string
	d    delta
	take int64
	held int64 // of take, what holds take
}

// atLeast is the available stock the change needs before it: the
// placements' take, and no less than the whole change takes (an ending alone
// never makes available negative).
func (c skuChange) atLeast() int64 {
	if c.take == 0 {
		return -c.d.available
	}
	return max(c.take, -c.d.available)
}

// changes are the write's changes of each SKU's counters, in SKU order: the
// placements' (ps) and the endings' decided.
func (w *endings) changes(ps []orders.Placement) []skuChange {
	by := map[string]*skuChange{}
	for _, t := range totalsOf(ps) {
		n := t.sold + t.reserved
		by[t.sku] = &skuChange{sku: t.sku, take: n, held: t.reserved, d: delta{available: -n, reserved: t.reserved, sold: t.sold}}
	}
	for sku, d := range w.sum {
		c := by[sku]
		if c == nil {
			c = &skuChange{sku: sku}
			by[sku] = c
		}
		c.d.available += d.available
		c.d.reserved += d.reserved
		c.d.sold += d.sold
		c.d.stocked += d.stocked
	}
	out := make([]skuChange, 0, len(by))
	for _, sku := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[sku])
	}
	return out
}

// write changes each SKU's counters once (guarded, fenced, in SKU order),
// writes the events, ends the holds, changes the caps' counters and inserts
// the rows; it returns the available stock after.
func (w *endings) write(ps []orders.Placement) (map[string]int64, error) {
	changes := w.changes(ps)
	returned := map[string]skuRow{}
	for i, c := range changes {
		for try := 1; ; try++ {
			n, err := w.store.shiftBy(w.tx, c.sku, c.d, c.atLeast(), c.held, w.fences[c.sku], w.events.count[c.sku], returned)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				break
			}
			// The SKUs before this one were updated in this transaction (their
			// fence is now the caller's own): only this one and the rest are judged.
			if err := whyRefused(w.tx, changes[i:], w.fences); !errors.Is(err, errNoVisibleReason) || try == guardTries {
				return nil, err
			}
		}
	}
	// The counters after, and so the events, are known now (on PostgreSQL
	// from the updates' RETURNING): the events ride in an INSERT below.
	var after map[string]skuRow
	var events *leading
	if len(changes) > 0 {
		skus := make([]string, len(changes))
		for i, c := range changes {
			skus[i] = c.sku
		}
		var err error
		if after, err = countersAfter(w.tx, skus, returned); err != nil {
			return nil, err
		}
		if err = w.allocateAndShift(ps, after); err != nil {
			return nil, err
		}
		if events, err = w.events.carried(w.store, w.tx, after); err != nil {
			return nil, err
		}
	}
	if err := w.endHolds(); err != nil {
		return nil, err
	}
	events, err := w.changeCaps(placedCaps(ps), events)
	if err != nil {
		return nil, err
	}
	events = w.rows.leadAllocations(w.tx, events)
	if err := w.rows.insert(w.tx, events); err != nil || len(changes) == 0 {
		return nil, err
	}
	return availableOf(after), nil
}

// changeCaps lowers the caps' counters by what the endings gave back, then
// raises them by what the placements take, under their caps (caps.go): on
// PostgreSQL as WITH queries added to l, beside the events. One statement
// cannot change a row twice, so a counter that both change is lowered in a
// statement of its own first.
func (w *endings) changeCaps(raised *capTally, l *leading) (*leading, error) {
	if w.tx.Name() == "postgres" && w.caps.overlaps(raised) {
		lowered, err := w.caps.lower(w.tx, nil)
		if err != nil {
			return nil, err
		}
		if err := lowered.alone(w.tx); err != nil {
			return nil, err
		}
		return raised.raise(w.tx, l)
	}
	l, err := w.caps.lower(w.tx, l)
	if err != nil {
		return nil, err
	}
	return raised.raise(w.tx, l)
}

// overlaps says whether t and u change a counter in common.
func (t *capTally) overlaps(u *capTally) bool {
	for k := range t.held {
		if _, ok := u.held[k]; ok {
			return true
		}
	}
	for k := range t.units {
		if _, ok := u.units[k]; ok {
			return true
		}
	}
	return false
}

// whyRefused tells a stale fence from missing stock after a guarded update
// touched no row. A stale fence wins: the caller is not the holder any more, or
// its token repeats one committed (the caller may advance it and try again).
func whyRefused(tx *gorm.DB, changes []skuChange, fences orders.Fences) error {
	skus := make([]string, len(changes))
	for i, c := range changes {
		skus[i] = c.sku
	}
	var rows []skuRow
	if err := tx.Where("sku IN ?", skus).Find(&rows).Error; err != nil {
		return err
	}
	bySKU := make(map[string]skuRow, len(rows))
	for _, r := range rows {
		bySKU[r.SKU] = r
	}
	for _, c := range changes {
		if r, ok := bySKU[c.sku]; ok && fences[c.sku] != orders.NoFence && r.Fence >= fences[c.sku] {
			return &orders.StaleFenceError{SKU: c.sku, Token: fences[c.sku], Last: r.Fence}
		}
	}
	short := &orders.InsufficientStockError{Available: map[string]int64{}}
	for _, c := range changes {
		r, ok := bySKU[c.sku]
		switch {
		case !ok && c.take == 0:
			return fmt.Errorf("sku %s: %w", c.sku, gorm.ErrRecordNotFound) // an ending's SKU that is not there
		case !ok || r.Available+r.BackorderLimit < c.atLeast() || r.Available < c.held:
			short.SKUs = append(short.SKUs, c.sku)
			short.Available[c.sku] = max(r.Available, 0)
		case r.Reserved+c.d.reserved < 0:
			return fmt.Errorf("sku %s: reserved %d cannot change by %d", c.sku, r.Reserved, c.d.reserved)
		}
	}
	if len(short.SKUs) == 0 {
		return errNoVisibleReason
	}
	return short
}

// errNoVisibleReason is a guarded update refused on stock that, read again,
// is enough: a write without the SKU's lock (db-atomic's, redis-atomic's)
// gave units back between the two. The update is tried again.
var errNoVisibleReason = errors.New("guarded update refused for no visible reason")

// guardTries bounds the tries of one SKU's guarded update that keep being
// refused for no visible reason.
const guardTries = 3

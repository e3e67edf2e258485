package gormstore

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// A write's locations (writeChanges, changes.go). After its guarded update
// of each SKU's row, which returns the number of the SKU's location rows,
// the SKUs stocked in more than the default location ("located") have their
// placements allocated over their locations, in the batch's order, and the
// rows of the locations concerned changed by the sum of the placements' and
// the endings' changes, in (SKU, location) order. The endings give each unit
// back to the location it came from (allocations), and a confirm sells what
// the hold held where it held it. A write of SKUs none of which is located
// reads and writes nothing here, but the holds' allocations when it ends
// holds.

// skuLoc is one SKU in one location.
type skuLoc struct{ sku, location string }

// allocationsOf reads the allocations of orders or holds (owners), by owner,
// each owner's in (SKU, location) order.
func allocationsOf(tx *gorm.DB, owners []string) (map[string][]allocationRow, error) {
	var rows []allocationRow
	if err := tx.Where("owner_id IN ?", owners).Order("owner_id, sku, location").Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string][]allocationRow, len(owners))
	for _, r := range rows {
		out[r.Owner] = append(out[r.Owner], r)
	}
	return out, nil
}

// from is where an owner's units of sku came from: its allocations, or all
// of quantity from the default location when it has none (placed before the
// SKU was located).
func from(allocs []allocationRow, owner, sku string, quantity int64) []allocationRow {
	var out []allocationRow
	for _, a := range allocs {
		if a.SKU == sku {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		out = []allocationRow{{Owner: owner, SKU: sku, Location: orders.DefaultLocation, Quantity: quantity}}
	}
	return out
}

// addAt adds d to what the write changes of sku in location.
func (w *endings) addAt(sku, location string, d delta) {
	if w.loc == nil {
		w.loc = map[skuLoc]delta{}
	}
	k := skuLoc{sku, location}
	t := w.loc[k]
	t.available += d.available
	t.reserved += d.reserved
	t.sold += d.sold
	t.stocked += d.stocked
	w.loc[k] = t
}

// giveBack is a hold's line an ending gives back (a release, an expiry) or
// confirms (order set: sold of its quantity sold, the rest given back).
// Where its units are is read only for a SKU the write finds located.
type giveBack struct {
	hold, order, sku string
	quantity, sold   int64
}

// endAt records the endings' lines of located SKUs location by location:
// a confirm's sold units sold where they were held, taken from the hold's
// locations in location order, the rest given back there; the confirms'
// orders' allocations (by order id) when their holds had some.
func (w *endings) endAt(located map[string]bool) (map[string][]orders.Allocation, error) {
	var holds []string
	for _, b := range w.backs {
		if located[b.sku] {
			holds = append(holds, b.hold)
		}
	}
	if len(holds) == 0 {
		return nil, nil
	}
	allocs, err := allocationsOf(w.tx, holds)
	if err != nil {
		return nil, err
	}
	byOrder := map[string][]orders.Allocation{}
	for _, b := range w.backs {
		if !located[b.sku] {
			continue
		}
		held := allocs[b.hold]
		n := b.sold
		for _, a := range from(held, b.hold, b.sku, b.quantity) {
			sold := min(n, a.Quantity)
			n -= sold
			w.addAt(b.sku, a.Location, delta{available: a.Quantity - sold, reserved: -a.Quantity, sold: sold})
			if sold > 0 && len(held) > 0 {
				byOrder[b.order] = append(byOrder[b.order], orders.Allocation{SKU: b.sku, Location: a.Location, Quantity: sold})
				w.rows.allocations = append(w.rows.allocations, allocationRow{Owner: b.order, SKU: b.sku, Location: a.Location, Quantity: sold})
			}
		}
	}
	return byOrder, nil
}

// allocateAndShift allocates the placements' lines of the located SKUs
// (their rows' locations > 0, after: the SKUs' rows after the write's
// update), records where each unit came from, and changes the locations'
// rows. A placement that cannot be allocated fails the write with a
// *PlacementError naming it.
func (w *endings) allocateAndShift(ps []orders.Placement, after map[string]skuRow) error {
	located := map[string]bool{}
	for sku, r := range after {
		if r.Locations > 0 {
			located[sku] = true
		}
	}
	if err := w.checkUnlocated(ps, located); err != nil {
		return err
	}
	if len(located) == 0 {
		return nil
	}
	var err error
	if w.confirmed, err = w.endAt(located); err != nil {
		return err
	}
	levels, err := levelsOf(w.tx, slices.Sorted(maps.Keys(located)))
	if err != nil {
		return err
	}
	avail := map[string][]orders.Level{}
	before := map[skuLoc]int64{}
	for sku, rows := range levels {
		for _, r := range rows {
			avail[sku] = append(avail[sku], orders.Level{Location: r.Location, Priority: r.Priority, Active: r.Active, Available: r.Available})
			before[skuLoc{sku, r.Location}] = r.Available
		}
	}
	for i := range ps {
		if err := w.allocatePlacement(i, &ps[i], located, avail); err != nil {
			return err
		}
	}
	keys := slices.SortedFunc(maps.Keys(w.loc), func(a, b skuLoc) int {
		return cmp.Or(strings.Compare(a.sku, b.sku), strings.Compare(a.location, b.location))
	})
	var changes []locChange
	for _, k := range keys {
		d := w.loc[k]
		if !located[k.sku] || d == (delta{}) {
			continue // an unlocated SKU's default location is its own row
		}
		changes = append(changes, locChange{k, d})
		w.events.cross(k.sku, k.location, before[k], before[k]+d.available, nil)
	}
	ok, err := shiftLocations(w.tx, changes)
	if err != nil {
		return err
	}
	if !ok {
		return &orders.InsufficientStockError{SKUs: []string{changes[0].sku}}
	}
	return nil
}

// locChange is a change of one SKU's counts in one location.
type locChange struct {
	skuLoc
	d delta
}

// shiftLocations makes changes (in (SKU, location) order), each guarded as
// shiftLocation guards one; false when a guard refused one. On PostgreSQL
// they are one statement (an UPDATE from a VALUES list), rather than a round
// trip each: a write's locations' rows are locked by its SKUs' rows, which
// it holds, so no two statements take them in two orders.
func shiftLocations(tx *gorm.DB, changes []locChange) (bool, error) {
	if len(changes) == 0 {
		return true, nil
	}
	if tx.Name() != "postgres" || len(changes) == 1 {
		for _, c := range changes {
			if ok, err := shiftLocation(tx, c.sku, c.location, c.d); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
	var q strings.Builder
	q.WriteString(`UPDATE sku_locations AS sl SET available = sl.available + v.da, reserved = sl.reserved + v.dr,
  sold = sl.sold + v.ds, stocked = sl.stocked + v.dst FROM (VALUES `)
	args := make([]any, 0, 6*len(changes))
	for i, c := range changes {
		if i > 0 {
			q.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&q, "($%d::text, $%d::text, $%d::bigint, $%d::bigint, $%d::bigint, $%d::bigint)", n+1, n+2, n+3, n+4, n+5, n+6)
		args = append(args, c.sku, c.location, c.d.available, c.d.reserved, c.d.sold, c.d.stocked)
	}
	q.WriteString(`) AS v(sku, location, da, dr, ds, dst)
WHERE sl.sku = v.sku AND sl.location = v.location AND sl.available + v.da >= 0 AND sl.reserved + v.dr >= 0`)
	res, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, q.String(), args...)
	if err != nil {
		return false, translated(tx, err)
	}
	n, err := res.RowsAffected()
	return n == int64(len(changes)), err
}

// demandsOf are what a placement asks of sku: its lines as sent, or the
// merged line, splittable, when none named a location or refused a split.
func demandsOf(p *orders.Placement, sku string, quantity int64) []orders.Demand {
	if p.Demands == nil {
		return []orders.Demand{{SKU: sku, Quantity: quantity}}
	}
	var out []orders.Demand
	for _, d := range p.Demands {
		if d.SKU == sku {
			out = append(out, d)
		}
	}
	return out
}

// allocatePlacement allocates placement i's lines of located SKUs from
// avail (changing it).
func (w *endings) allocatePlacement(i int, p *orders.Placement, located map[string]bool, avail map[string][]orders.Level) error {
	o := &p.Order
	o.Allocations = nil
	for _, it := range o.Items {
		if !located[it.SKU] {
			continue
		}
		demands := demandsOf(p, it.SKU, int64(it.Quantity))
		got, ok := orders.Allocate(avail[it.SKU], demands, w.store.allocation)
		if !ok {
			for _, d := range demands {
				if d.Location == "" || slices.ContainsFunc(avail[it.SKU], func(l orders.Level) bool { return l.Location == d.Location }) {
					continue
				}
				if err := knownLocation(w.tx, d.Location); err != nil {
					return &orders.PlacementError{Index: i, Err: err}
				}
			}
			var have int64
			for _, l := range avail[it.SKU] {
				if l.Active {
					have += l.Available
				}
			}
			return &orders.PlacementError{Index: i, Err: &orders.InsufficientStockError{SKUs: []string{it.SKU},
				Available: map[string]int64{it.SKU: have}}}
		}
		for _, a := range got {
			a.SKU = it.SKU
			o.Allocations = append(o.Allocations, a)
			w.rows.allocations = append(w.rows.allocations, allocationRow{Owner: o.ID, SKU: it.SKU, Location: a.Location, Quantity: a.Quantity})
			if p.Hold != nil {
				w.addAt(it.SKU, a.Location, delta{available: -a.Quantity, reserved: a.Quantity})
			} else {
				w.addAt(it.SKU, a.Location, delta{available: -a.Quantity, sold: a.Quantity})
			}
		}
	}
	return nil
}

// checkUnlocated refuses a placement's line that names a location other
// than the default for a SKU that is stocked in the default location only:
// the location has none of it (or does not exist).
func (w *endings) checkUnlocated(ps []orders.Placement, located map[string]bool) error {
	for i, p := range ps {
		for _, d := range p.Demands {
			if located[d.SKU] || d.Location == "" || d.Location == orders.DefaultLocation {
				continue
			}
			if err := knownLocation(w.tx, d.Location); err != nil {
				return &orders.PlacementError{Index: i, Err: err}
			}
			return &orders.PlacementError{Index: i, Err: &orders.InsufficientStockError{SKUs: []string{d.SKU},
				Available: map[string]int64{d.SKU: 0}}}
		}
	}
	return nil
}

// allocationsIn are allocation rows in the domain's words (nil for none).
func allocationsIn(rows []allocationRow) []orders.Allocation {
	var out []orders.Allocation
	for _, r := range rows {
		out = append(out, orders.Allocation{SKU: r.SKU, Location: r.Location, Quantity: r.Quantity})
	}
	return out
}

// leadAllocations moves the allocations' INSERT into the WITH queries that
// lead the write's first INSERT (l, with the events and the caps'
// counters), on PostgreSQL: a round trip fewer for a batch of a located SKU.
// Elsewhere, or for more rows than one INSERT takes, they stay an INSERT of
// their own.
func (r *inserts) leadAllocations(tx *gorm.DB, l *leading) *leading {
	rows := r.allocations
	if tx.Name() != "postgres" || len(rows) == 0 || len(rows) > insertRows {
		return l
	}
	r.allocations = nil
	args := make([]any, 0, 4*len(rows))
	for _, row := range rows {
		args = append(args, row.values()...)
	}
	return l.with("written_allocations", func(n int) string {
		b, _ := appendInsert(nil, make([]any, n), rows, true) // numbered from $n+1
		return string(b)
	}, args...)
}

package gormstore

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Stock per location. A SKU whose stock is all in the default location has
// no rows in sku_locations (skus.locations = 0): its own row is that
// location's counts, and nothing here runs for it. The first change of its
// stock in another location "locates" it: the default location's row is
// made from the SKU's counters, and from then on every write that changes
// its counters changes the rows of the locations concerned by the same
// amounts, in the same transaction, after the SKU's row (whose lock orders
// every writer of the SKU: no deadlock whatever the order of an order's
// lines or of the locations they name).

// levelRow is a SKU's counts in one location, with the location's priority
// and whether it is active.
type levelRow struct {
	SKU       string
	Location  string
	Available int64
	Reserved  int64
	Sold      int64
	Stocked   int64
	Priority  int64
	Active    bool
}

func (l levelRow) stock() orders.LocationStock {
	return orders.LocationStock{Location: l.Location, Available: l.Available, Held: l.Reserved, Sold: l.Sold, Stocked: l.Stocked}
}

// levelsOf reads the location rows of skus, by SKU, each SKU's in location
// order.
func levelsOf(tx *gorm.DB, skus []string) (map[string][]levelRow, error) {
	var rows []levelRow
	err := tx.Raw(`SELECT sl.sku, sl.location, sl.available, sl.reserved, sl.sold, sl.stocked, l.priority, l.active
FROM sku_locations sl JOIN locations l ON l.id = sl.location
WHERE sl.sku IN ? ORDER BY sl.sku, sl.location`, skus).Scan(&rows).Error
	if err != nil {
		return nil, err
	}
	out := make(map[string][]levelRow, len(skus))
	for _, r := range rows {
		out[r.SKU] = append(out[r.SKU], r)
	}
	return out, nil
}

// knownLocation fails with orders.ErrUnknownLocation for a location that
// does not exist.
func knownLocation(tx *gorm.DB, id string) error {
	var n int64
	if err := tx.Model(&locationRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", orders.ErrUnknownLocation, id)
	}
	return nil
}

// locate gives sku rows for the default location (from its counters, when
// it has none yet) and for location, and counts them on the SKU's row. The
// SKU's row must be locked by the caller's transaction already.
func locate(tx *gorm.DB, sku, location string) error {
	var row skuRow
	if err := tx.Where("sku = ?", sku).Take(&row).Error; err != nil {
		return err
	}
	var have []skuLocationRow
	if err := tx.Where("sku = ?", sku).Find(&have).Error; err != nil {
		return err
	}
	has := func(loc string) bool {
		for _, h := range have {
			if h.Location == loc {
				return true
			}
		}
		return false
	}
	var add []skuLocationRow
	if len(have) == 0 {
		add = append(add, skuLocationRow{SKU: sku, Location: orders.DefaultLocation,
			Available: row.Available, Reserved: row.Reserved, Sold: row.Sold, Stocked: row.Stocked})
	}
	if location != orders.DefaultLocation && !has(location) {
		add = append(add, skuLocationRow{SKU: sku, Location: location})
	}
	if len(add) == 0 {
		return nil
	}
	if err := tx.Create(&add).Error; err != nil {
		return err
	}
	return tx.Model(&skuRow{}).Where("sku = ?", sku).Update("locations", int64(len(have)+len(add))).Error
}

// shiftLocation changes a SKU's counts in one location by d, guarded as the
// SKU's own row is (available and reserved stay >= 0); false when the guard
// refused it.
func shiftLocation(tx *gorm.DB, sku, location string, d delta) (bool, error) {
	if d == (delta{}) {
		return true, nil // MySQL counts a row an UPDATE leaves as it was as no row
	}
	res := tx.Exec(`UPDATE sku_locations SET available = available + ?, reserved = reserved + ?, sold = sold + ?, stocked = stocked + ?
WHERE sku = ? AND location = ? AND available + ? >= 0 AND reserved + ? >= 0`,
		d.available, d.reserved, d.sold, d.stocked, sku, location, d.available, d.reserved)
	return res.RowsAffected == 1, res.Error
}

// StockLocations reads a SKU's counts per location, in location order; none
// for a SKU whose stock is all in the default location (its counts are the
// SKU's own).
func (s *Store) StockLocations(ctx context.Context, sku string) ([]orders.LocationStock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	out, err := locationsIn(db, sku)
	return out, unavailable("stock locations", err)
}

// atLocation runs a change of sku's stock in location: the SKU's row
// (created empty when new: then created is true) changed by d, fenced, with
// events events numbered, and the location's row by the same, the SKU
// located first. check, when not nil, sees the location's counts before
// the change and may refuse it. It returns the SKU's counters after, with
// its locations, and writes the events.
func (s *Store) atLocation(tx *gorm.DB, sku, location string, fence int64, events *outbox,
	change func(cur levelRow) (delta, error),
) (st orders.Stock, created bool, err error) {
	if err := knownLocation(tx, location); err != nil {
		return orders.Stock{}, false, err
	}
	if err := tx.Where("sku = ?", sku).Take(&skuRow{}).Error; errors.Is(err, gorm.ErrRecordNotFound) {
		created = true
		if err := tx.Create(&skuRow{SKU: sku, UpdatedAt: s.now()}).Error; err != nil {
			return orders.Stock{}, false, err
		}
	} else if err != nil {
		return orders.Stock{}, false, err
	}
	// The fenced shift first, by nothing: it takes the SKU's row lock and
	// refuses a stale holder before anything is read under it.
	if err := s.shift(tx, sku, delta{}, fence, 0, nil); err != nil {
		return orders.Stock{}, false, err
	}
	if err := locate(tx, sku, location); err != nil {
		return orders.Stock{}, false, err
	}
	levels, err := levelsOf(tx, []string{sku})
	if err != nil {
		return orders.Stock{}, false, err
	}
	var cur levelRow
	for _, l := range levels[sku] {
		if l.Location == location {
			cur = l
		}
	}
	d, err := change(cur)
	if err != nil {
		return orders.Stock{}, false, err
	}
	if err := s.shift(tx, sku, d, orders.NoFence, events.count[sku], nil); err != nil {
		return orders.Stock{}, false, err
	}
	if ok, err := shiftLocation(tx, sku, location, d); err != nil || !ok {
		return orders.Stock{}, false, cmpErr(err, fmt.Errorf("sku %s at %s: counts cannot change by %+v", sku, location, d))
	}
	if !created {
		events.cross(sku, location, cur.Available, cur.Available+d.available, nil)
	}
	if d.stocked != 0 {
		if err := tx.Create(&ledgerRow{SKU: sku, Delta: d.stocked, Kind: kindRestock, Fence: fence, CreatedAt: s.now()}).Error; err != nil {
			return orders.Stock{}, false, err
		}
	}
	st, err = stockAfter(s, tx, sku, events)
	if err != nil {
		return orders.Stock{}, false, err
	}
	st.Locations, err = locationsIn(tx, sku)
	return st, created, err
}

// cmpErr is err, or else alt.
func cmpErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// locationsIn reads a SKU's counts per location in a transaction.
func locationsIn(tx *gorm.DB, sku string) ([]orders.LocationStock, error) {
	levels, err := levelsOf(tx, []string{sku})
	if err != nil {
		return nil, err
	}
	out := make([]orders.LocationStock, len(levels[sku]))
	for i, l := range levels[sku] {
		out[i] = l.stock()
	}
	return out, nil
}

// SetLocationStock sets a SKU's available units in one location, creating
// the SKU when new (then true), fenced; a set with ExpectedAvailable other
// than the location's available changes nothing and fails with a
// *StaleQuantityError.
func (s *Store) SetLocationStock(ctx context.Context, sku, location string, set orders.StockSet, fence int64) (orders.Stock, bool, error) {
	var st orders.Stock
	var created bool
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var events outbox
		var err error
		st, created, err = s.atLocation(tx, sku, location, fence, &events, func(cur levelRow) (delta, error) {
			if e := set.ExpectedAvailable; e != nil && *e != cur.Available {
				return delta{}, &orders.StaleQuantityError{Expected: *e, Stock: orders.Stock{SKU: sku, Available: cur.Available,
					Held: cur.Reserved, Sold: cur.Sold, Stocked: cur.Stocked}}
			}
			d := delta{available: set.Available - cur.Available, stocked: set.Available - cur.Available}
			if d.available != 0 {
				events.add(sku, orders.EventStockSet, set.Available, d, nil, nil)
				events.at(location)
			}
			return d, nil
		})
		return err
	})
	if err != nil {
		return orders.Stock{}, false, unavailable("set location stock", err)
	}
	return st, created, nil
}

// RestockLocation adds stock to a SKU in one location, creating the SKU when
// new (then true), fenced, with k's record (when it has a key) in the same
// transaction.
func (s *Store) RestockLocation(ctx context.Context, sku, location string, quantity, fence int64, k orders.Keyed) (orders.Stock, bool, error) {
	var st orders.Stock
	var created bool
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var events outbox
		d := delta{available: quantity, stocked: quantity}
		events.add(sku, orders.EventStockRestocked, quantity, d, nil, nil)
		events.at(location)
		var err error
		st, created, err = s.atLocation(tx, sku, location, fence, &events, func(levelRow) (delta, error) { return d, nil })
		if err != nil {
			return err
		}
		return record(tx, k.Key, k.Hash, orders.Outcome{}, s.now())
	})
	if err != nil {
		return orders.Stock{}, false, unavailable("restock location", conflict(err))
	}
	return st, created, nil
}

// Transfer moves available units of a SKU from one location to another,
// fenced, with k's record (when it has a key) in the same transaction: never
// more than from has (an *InsufficientStockError then, and nothing moves).
// The SKU's counters do not change; each location's stocked moves with its
// available, so that I1 holds in each.
func (s *Store) Transfer(ctx context.Context, sku string, t orders.Transfer, fence int64, k orders.Keyed) (orders.Stock, error) {
	var st orders.Stock
	err := s.tx(ctx, func(tx *gorm.DB) error {
		for _, loc := range []string{t.From, t.To} {
			if err := knownLocation(tx, loc); err != nil {
				return err
			}
		}
		var events outbox
		events.add(sku, orders.EventStockTransferredOut, t.Quantity, delta{}, nil, nil)
		events.at(t.From)
		events.add(sku, orders.EventStockTransferredIn, t.Quantity, delta{}, nil, nil)
		events.at(t.To)
		if err := s.shift(tx, sku, delta{}, fence, events.count[sku], nil); err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return orders.ErrNotFound
			}
			return err
		}
		for _, loc := range []string{t.From, t.To} {
			if err := locate(tx, sku, loc); err != nil {
				return err
			}
		}
		q := t.Quantity
		levels, err := levelsOf(tx, []string{sku})
		if err != nil {
			return err
		}
		have := map[string]int64{}
		for _, l := range levels[sku] {
			have[l.Location] = l.Available
		}
		if have[t.From] < q {
			return &orders.InsufficientStockError{SKUs: []string{sku}, Available: map[string]int64{sku: have[t.From]}}
		}
		for _, side := range []struct {
			loc string
			q   int64
		}{{t.From, -q}, {t.To, q}} {
			ok, err := shiftLocation(tx, sku, side.loc, delta{available: side.q, stocked: side.q})
			if err != nil || !ok {
				return cmpErr(err, fmt.Errorf("sku %s at %s: available cannot change by %d", sku, side.loc, side.q))
			}
			events.cross(sku, side.loc, have[side.loc], have[side.loc]+side.q, nil)
		}
		if err := record(tx, k.Key, k.Hash, orders.Outcome{}, s.now()); err != nil {
			return err
		}
		if st, err = stockAfter(s, tx, sku, &events); err != nil {
			return err
		}
		st.Locations, err = locationsIn(tx, sku)
		return err
	})
	if err != nil {
		return orders.Stock{}, unavailable("transfer", conflict(err))
	}
	return st, nil
}

// shiftDefault changes a located SKU's default location by d, for a change
// of the SKU's stock that names no location (a restock, a set): nothing for
// a SKU that is not located, whose default location is its own row. A set
// that would leave the default location less than nothing is refused: the
// other locations hold more than the SKU is to have.
func shiftDefault(tx *gorm.DB, sku string, d delta, events *outbox) error {
	if d == (delta{}) {
		return nil
	}
	var cur []skuLocationRow
	if err := tx.Where("sku = ? AND location = ?", sku, orders.DefaultLocation).Find(&cur).Error; err != nil || len(cur) == 0 {
		return err
	}
	ok, err := shiftLocation(tx, sku, orders.DefaultLocation, d)
	if err != nil {
		return err
	}
	if !ok {
		return &orders.ValidationError{Fields: []orders.FieldError{{Field: "available",
			Message: "the SKU's other locations hold more than that: set them with PUT /v1/skus/{sku}/locations/{location}"}}}
	}
	events.cross(sku, orders.DefaultLocation, cur[0].Available, cur[0].Available+d.available, nil)
	return nil
}

// cancelAt gives a cancelled order's units of located SKUs (rows: the SKUs'
// rows after the cancel's update) back to the locations they came from.
func cancelAt(tx *gorm.DB, id string, lines []lineRow, rows map[string]skuRow, events *outbox) error {
	var located []lineRow
	for _, l := range lines {
		if rows[l.SKU].Locations > 0 {
			located = append(located, l)
		}
	}
	if len(located) == 0 {
		return nil
	}
	allocs, err := allocationsOf(tx, []string{id})
	if err != nil {
		return err
	}
	skus := make([]string, len(located))
	for i, l := range located {
		skus[i] = l.SKU
	}
	levels, err := levelsOf(tx, skus)
	if err != nil {
		return err
	}
	for _, l := range located {
		for _, a := range from(allocs[id], id, l.SKU, l.Quantity) {
			ok, err := shiftLocation(tx, l.SKU, a.Location, delta{available: a.Quantity, sold: -a.Quantity})
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("sku %s at %s: sold cannot go down by %d", l.SKU, a.Location, a.Quantity)
			}
			for _, lv := range levels[l.SKU] {
				if lv.Location == a.Location {
					events.cross(l.SKU, a.Location, lv.Available, lv.Available+a.Quantity, nil)
				}
			}
		}
	}
	return nil
}

// Backorders reads the available stock of the SKUs that exist, and the
// backorder limits of those that have one, in one statement.
func (s *Store) Backorders(ctx context.Context, skus []string) (map[string]int64, map[string]int64, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []skuRow
	if err := db.Select("sku", "available", "backorder_limit").Where("sku IN ?", skus).Find(&rows).Error; err != nil {
		return nil, nil, unavailable("available and backorder limits", err)
	}
	available := make(map[string]int64, len(rows))
	limits := map[string]int64{}
	for _, r := range rows {
		available[r.SKU] = r.Available
		if r.BackorderLimit > 0 {
			limits[r.SKU] = r.BackorderLimit
		}
	}
	return available, limits, nil
}

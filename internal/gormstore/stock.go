package gormstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// Cancel marks a placed order cancelled and returns its stock, fenced.
func (s *Store) Cancel(ctx context.Context, id string, fences orders.Fences, at time.Time) (orders.Order, map[string]int64, error) {
	var after map[string]int64
	var o orders.Order
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&orderRow{}).Where("id = ? AND status = ?", id, orders.StatusPlaced).
			Updates(map[string]any{"status": orders.StatusCancelled, "cancelled_at": at.UTC()})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var n int64
			if err := tx.Model(&orderRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return orders.ErrNotFound
			}
			return orders.ErrAlreadyCancelled
		}
		var lines []lineRow
		if err := tx.Where("order_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
			return err
		}
		var row orderRow // its client and customer, whose units come back (I9)
		if err := tx.Select("client_id", "customer").Where("id = ?", id).Take(&row).Error; err != nil {
			return err
		}
		var caps capTally
		skus := make([]string, len(lines))
		var events outbox
		returned := map[string]skuRow{}
		for i, l := range lines {
			skus[i] = l.SKU
			d := delta{available: l.Quantity, sold: -l.Quantity}
			if err := s.shift(tx, l.SKU, d, fences[l.SKU], 1, returned); err != nil {
				return err
			}
			events.add(l.SKU, orders.EventOrderCancelled, l.Quantity, d, &id, nil)
			caps.addUnits(l.SKU, row.ClientID, row.Customer, l.Quantity)
			entry := ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kindCancel, OrderID: &id, Fence: fences[l.SKU], CreatedAt: at.UTC()}
			if err := tx.Create(&entry).Error; err != nil {
				return err
			}
		}
		rows, err := countersAfter(tx, skus, returned)
		if err != nil {
			return err
		}
		if err := cancelAt(tx, id, lines, rows, &events); err != nil {
			return err
		}
		after = availableOf(rows)
		if err := events.write(s, tx, rows); err != nil {
			return err
		}
		l, err := caps.lower(tx, nil)
		if err == nil {
			err = l.alone(tx) // on PostgreSQL, the WITH queries lower returned
		}
		if err != nil {
			return err
		}
		// Read in the transaction: a read after the commit that failed would
		// answer 503 for a cancel that was made.
		o, err = readOrder(tx, id)
		return err
	})
	if err != nil {
		return orders.Order{}, nil, unavailable("cancel", err)
	}
	return o, after, nil
}

// Restock adds stock, creating the SKU if new, fenced, with a ledger entry:
// RestockOnce with no key.
func (s *Store) Restock(ctx context.Context, sku string, quantity, fence int64) (orders.Stock, error) {
	return s.RestockOnce(ctx, sku, quantity, fence, orders.Keyed{})
}

// RestockOnce is Restock that also writes k's idempotency record (if it has a
// key) in its transaction, so that a retry whose first answer was lost finds
// the restock made, or not made, never half.
func (s *Store) RestockOnce(ctx context.Context, sku string, quantity, fence int64, k orders.Keyed) (orders.Stock, error) {
	var after orders.Stock
	err := s.tx(ctx, func(tx *gorm.DB) error {
		d := delta{available: quantity, stocked: quantity}
		var events outbox // the restock's event first; a location's crossing after it
		events.add(sku, orders.EventStockRestocked, quantity, d, nil, nil)
		err := s.shift(tx, sku, d, fence, 1, nil)
		if err == nil {
			err = shiftDefault(tx, sku, d, &events)
		}
		if errors.Is(err, gorm.ErrRecordNotFound) {
			events.creates(sku)
			err = tx.Create(&skuRow{SKU: sku, Available: quantity, Stocked: quantity, Fence: fence, EventSeq: 1, UpdatedAt: s.now()}).Error
		}
		if err != nil {
			return err
		}
		entry := ledgerRow{SKU: sku, Delta: quantity, Kind: kindRestock, Fence: fence, CreatedAt: s.now()}
		if err := tx.Create(&entry).Error; err != nil {
			return err
		}
		if err := record(tx, k.Key, k.Hash, orders.Outcome{}, s.now()); err != nil {
			return err
		}
		after, err = stockAfter(s, tx, sku, &events)
		return err
	})
	if err != nil {
		return orders.Stock{}, unavailable("restock", conflict(err))
	}
	return after, nil
}

// stockAfter reads one SKU's counters in a write's transaction, so that a
// write that committed is answered with them, never with a read after it that
// failed, and writes the write's events.
func stockAfter(s *Store, tx *gorm.DB, sku string, events *outbox) (orders.Stock, error) {
	rows, err := counters(tx, []string{sku})
	if err != nil {
		return orders.Stock{}, err
	}
	row, ok := rows[sku]
	if !ok {
		return orders.Stock{}, gorm.ErrRecordNotFound
	}
	return row.stock(), events.write(s, tx, rows)
}

// SetStock sets a SKU's available units to set.Available, creating the SKU if
// it is new, fenced like Restock; the ledger records the difference as a
// restock (negative when it lowers the stock). set.MaxPerCustomer and
// set.LowStockThreshold, when not nil, set the SKU's limit per customer and
// its low-stock threshold (0 removes either), in the same transaction. With
// set.ExpectedAvailable it is a compare-and-set: the SKU's row is read and
// locked (FOR UPDATE) in the transaction, and when its available stock is not
// the one expected (a SKU that does not exist has 0), nothing is written and
// the answer is a *orders.StaleQuantityError with the stock as it is. It
// returns whether the SKU was created.
func (s *Store) SetStock(ctx context.Context, sku string, set orders.StockSet, fence int64) (orders.Stock, bool, error) {
	available := set.Available
	created := false
	var after orders.Stock
	err := s.tx(ctx, func(tx *gorm.DB) error {
		// Locked, so that a set between this read and the shift below (none
		// under the SKU's lock) waits for this one's commit and reads what
		// it left: two compare-and-sets of one expected stock cannot both
		// win.
		var row skuRow
		err := tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Where("sku = ?", sku).Take(&row).Error
		missing := errors.Is(err, gorm.ErrRecordNotFound)
		if err != nil && !missing {
			return err
		}
		// What is available, as the stock shows it: units owed to backorders
		// are filled first by the units set, as a restock's are.
		have := max(row.Available, 0)
		if e := set.ExpectedAvailable; e != nil && *e != have {
			st := row.stock()
			st.SKU = sku
			return &orders.StaleQuantityError{Expected: *e, Stock: st}
		}
		d := delta{available: available - have, stocked: available - have}
		if b := set.BackorderLimit; b != nil && *b < -(row.Available+d.available) {
			return &orders.ValidationError{Fields: []orders.FieldError{{Field: "backorder_limit",
				Message: fmt.Sprintf("%d units would still be owed: the limit cannot be lower", -(row.Available + d.available))}}}
		}
		var events outbox
		if available != have || missing {
			events.add(sku, orders.EventStockSet, available, d, nil, nil)
		}
		if missing {
			created = true
			events.creates(sku)
			err = tx.Create(&skuRow{SKU: sku, Available: available, Stocked: available, Fence: fence, EventSeq: 1, UpdatedAt: s.now()}).Error
		} else {
			// The guarded, fenced shift by the difference.
			err = s.shift(tx, sku, d, fence, events.count[sku], nil)
			if err == nil {
				err = shiftDefault(tx, sku, d, &events)
			}
		}
		if err != nil {
			return err
		}
		if available != have || created {
			err = tx.Create(&ledgerRow{SKU: sku, Delta: available - have, Kind: kindRestock, Fence: fence, CreatedAt: s.now()}).Error
			if err != nil {
				return err
			}
		}
		// Under the SKU's row lock: the next raise of a customer's units
		// reads the limit, the next write's events the threshold.
		limits := map[string]any{}
		if m := set.MaxPerCustomer; m != nil {
			limits["max_per_customer"] = positive(*m)
		}
		if t := set.LowStockThreshold; t != nil {
			limits["low_stock_threshold"] = positive(*t)
		}
		if b := set.BackorderLimit; b != nil {
			limits["backorder_limit"] = *b
		}
		if len(limits) > 0 {
			if err := tx.Model(&skuRow{}).Where("sku = ?", sku).Updates(limits).Error; err != nil {
				return err
			}
		}
		after, err = stockAfter(s, tx, sku, &events)
		return err
	})
	if err != nil {
		return orders.Stock{}, false, unavailable("set stock", err)
	}
	return after, created, nil
}

// positive is n when it is above 0, else nil (NULL: none).
func positive(n int64) *int64 {
	if n > 0 {
		return &n
	}
	return nil
}

// SKUs lists up to limit SKUs' counters after the SKU after ("" from the
// first), in SKU order: one range read of the primary key.
func (s *Store) SKUs(ctx context.Context, after string, limit int) ([]orders.Stock, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []skuRow
	q := db.Order("sku").Limit(limit)
	if after != "" {
		q = q.Where("sku > ?", after)
	}
	if err := q.Find(&rows).Error; err != nil {
		return nil, unavailable("list skus", err)
	}
	out := make([]orders.Stock, len(rows))
	for i, r := range rows {
		out[i] = r.stock()
	}
	return out, nil
}

// Orders lists up to limit orders, newest first, from the one before the
// order id before ("" from the newest): one range read of the primary key (ids
// sort by time), then their lines by the lines' primary key.
func (s *Store) Orders(ctx context.Context, owner, before string, limit int) ([]orders.Order, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []orderRow
	q := db.Order("id DESC").Limit(limit)
	if owner != "" {
		q = q.Where("client_id = ?", owner)
	}
	if before != "" {
		q = q.Where("id < ?", before)
	}
	if err := q.Find(&rows).Error; err != nil {
		return nil, unavailable("list orders", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var lines []lineRow
	if err := db.Where("order_id IN ?", ids).Find(&lines).Error; err != nil {
		return nil, unavailable("list order lines", err)
	}
	items := map[string][]orders.Item{}
	for _, l := range lines {
		items[l.OrderID] = append(items[l.OrderID], orders.Item{SKU: l.SKU, Quantity: int(l.Quantity)})
	}
	out := make([]orders.Order, len(rows))
	for i, r := range rows {
		out[i] = r.order(items[r.ID])
	}
	return out, nil
}

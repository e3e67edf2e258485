package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// Holds. Every decision on a hold's expiry is taken on the database's clock
// (clock, clock.go), read in the transaction that acts on it: replicas' clocks may differ,
// the database's is one. A hold is locked (SELECT ... FOR UPDATE) by whatever
// ends or extends it, so that confirm, release, extend and the sweeper's expiry
// of one hold are serialized by the database even when the per-SKU locks were
// lost; each then acts only on a hold still held and, but for release, not past
// its expiry.

// insertHolds adds the rows of the batch's holds, setting each one's expiry
// from the database's clock.
func (s *Store) insertHolds(tx *gorm.DB, holds []orders.Placement, fences orders.Fences) ([]holdRow, []holdLineRow, []ledgerRow, error) {
	if len(holds) == 0 {
		return nil, nil, nil, nil
	}
	now, err := s.clock(tx)
	if err != nil {
		return nil, nil, nil, err
	}
	var rows []holdRow
	var lines []holdLineRow
	var ledger []ledgerRow
	for _, p := range holds {
		o := p.Order
		p.Hold.ExpiresAt = stamp(now.Add(p.Hold.TTL))
		rows = append(rows, holdRow{ID: o.ID, Status: string(orders.HoldHeld), CreatedAt: o.CreatedAt, ExpiresAt: p.Hold.ExpiresAt})
		for _, it := range o.Items {
			lines = append(lines, holdLineRow{HoldID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)})
			ledger = append(ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindHold, HoldID: &o.ID,
				Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
		}
	}
	return rows, lines, ledger, nil
}

// Reservation returns one hold; a hold past its expiry reads expired.
func (s *Store) Reservation(ctx context.Context, id string) (orders.Reservation, error) {
	// No transaction: a hold's lines never change, and its row is read once.
	db, cancel := s.conn(ctx)
	defer cancel()
	row, lines, err := readHold(db, id, false)
	if err != nil {
		return orders.Reservation{}, unavailable("reservation", err)
	}
	now, err := s.clock(db)
	if err != nil {
		return orders.Reservation{}, unavailable("reservation", err)
	}
	return row.reservation(lines, now), nil
}

// Reservations lists up to limit holds before the hold id before (all when
// empty), newest first (hold ids are time-sortable), with their lines.
func (s *Store) Reservations(ctx context.Context, before string, limit int) ([]orders.Reservation, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []holdRow
	q := db.Order("id DESC").Limit(limit)
	if before != "" {
		q = q.Where("id < ?", before)
	}
	if err := q.Find(&rows).Error; err != nil {
		return nil, unavailable("list reservations", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	byHold, err := linesOf(db, ids)
	if err != nil {
		return nil, unavailable("list reservation lines", err)
	}
	now, err := s.clock(db)
	if err != nil {
		return nil, unavailable("list reservations", err)
	}
	out := make([]orders.Reservation, len(rows))
	for i, r := range rows {
		out[i] = r.reservation(byHold[r.ID], now)
	}
	return out, nil
}

// readHold reads a hold and its lines, locking the hold's row when lock is set.
func readHold(tx *gorm.DB, id string, lock bool) (holdRow, []holdLineRow, error) {
	var row holdRow
	q := tx
	if lock {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	if err := q.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return row, nil, orders.ErrNotFound
		}
		return row, nil, err
	}
	var lines []holdLineRow
	if err := tx.Where("reservation_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
		return row, nil, err
	}
	return row, lines, nil
}

func (r holdRow) reservation(lines []holdLineRow, now time.Time) orders.Reservation {
	out := orders.Reservation{ID: r.ID, Status: orders.HoldStatus(r.Status), CreatedAt: r.CreatedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(),
		Items: make([]orders.Item, len(lines))}
	if out.Status == orders.HoldHeld && !now.Before(out.ExpiresAt) {
		out.Status = orders.HoldExpired // expired for every purpose, swept or not
	}
	if r.EndedAt != nil {
		at := r.EndedAt.UTC()
		out.EndedAt = &at
	}
	if r.OrderID != nil {
		out.OrderID = *r.OrderID
	}
	for i, l := range lines {
		out.Items[i] = orders.Item{SKU: l.SKU, Quantity: int(l.Quantity)}
	}
	slices.SortFunc(out.Items, func(a, b orders.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return out
}

// live locks a hold and returns it if it is held and not past its expiry, with
// the database's time; else a *HoldEndedError (or ErrNotFound).
func (s *Store) live(tx *gorm.DB, id string) (holdRow, []holdLineRow, time.Time, error) {
	row, lines, err := readHold(tx, id, true)
	if err != nil {
		return row, nil, time.Time{}, err
	}
	now, err := s.clock(tx)
	if err != nil {
		return row, nil, time.Time{}, err
	}
	if r := row.reservation(lines, now); r.Status != orders.HoldHeld {
		return row, nil, now, &orders.HoldEndedError{ID: id, Status: r.Status, OrderID: r.OrderID}
	}
	return row, lines, now, nil
}

// Confirm makes a held hold's units an order: the units confirmed move from
// reserved to sold, the rest back to available, never checked against
// available (they were set aside). It returns the order and the available stock.
func (s *Store) Confirm(ctx context.Context, c orders.Confirmation, fences orders.Fences) (orders.Order, map[string]int64, error) {
	var after map[string]int64
	o := c.Order
	err := s.tx(ctx, func(tx *gorm.DB) error {
		row, lines, now, err := s.live(tx, c.HoldID)
		if err != nil {
			return err
		}
		confirm, err := confirmed(lines, o.Items)
		if err != nil {
			return err
		}
		o.Items, o.ReservationID = nil, c.HoldID
		var ledger []ledgerRow
		skus := make([]string, len(lines))
		for i, l := range lines {
			skus[i] = l.SKU
			n := confirm[l.SKU]
			if err := s.shift(tx, l.SKU, delta{available: l.Quantity - n, reserved: -l.Quantity, sold: n}, fences[l.SKU]); err != nil {
				return err
			}
			if n > 0 {
				o.Items = append(o.Items, orders.Item{SKU: l.SKU, Quantity: int(n)})
			}
			if l.Quantity > n {
				ledger = append(ledger, ledgerRow{SKU: l.SKU, Delta: l.Quantity - n, Kind: kindRelease, HoldID: &row.ID,
					Fence: fences[l.SKU], CreatedAt: stamp(now)})
			}
		}
		if len(o.Items) == 0 {
			return &orders.ValidationError{Fields: []orders.FieldError{{Field: "items", Message: "a confirm needs at least one unit"}}}
		}
		if err := s.endHold(tx, row.ID, orders.HoldConfirmed, now, &o.ID); err != nil {
			return err
		}
		// The order's lines, with no sale in the ledger: available did not change.
		orow, olines := orderRows(o)
		if err := tx.Create(&orow).Error; err != nil {
			return err
		}
		if err := createAll(tx, olines); err != nil {
			return err
		}
		if err := createAll(tx, ledger); err != nil {
			return err
		}
		if err := record(tx, c.Key, c.Hash, orders.Outcome{OrderID: o.ID}, s.now()); err != nil {
			return err
		}
		after, err = available(tx, skus)
		return err
	})
	if err != nil {
		return orders.Order{}, nil, unavailable("confirm", conflict(err))
	}
	return o, after, nil
}

// confirmed is how many units of each SKU a confirm takes: all of them when
// want is empty, else what want lists, at most what is held.
func confirmed(lines []holdLineRow, want []orders.Item) (map[string]int64, error) {
	out := make(map[string]int64, len(lines))
	held := make(map[string]int64, len(lines))
	for _, l := range lines {
		held[l.SKU] = l.Quantity
		if len(want) == 0 {
			out[l.SKU] = l.Quantity
		}
	}
	var errs []orders.FieldError
	for i, it := range want {
		h, ok := held[it.SKU]
		switch {
		case !ok:
			errs = append(errs, orders.FieldError{Field: fmt.Sprintf("items[%d].sku", i), Message: "is not in the hold"})
		case int64(it.Quantity) > h:
			errs = append(errs, orders.FieldError{Field: fmt.Sprintf("items[%d].quantity", i), Message: fmt.Sprintf("is more than the %d held", h)})
		default:
			out[it.SKU] = int64(it.Quantity)
		}
	}
	if len(errs) > 0 {
		return nil, &orders.ValidationError{Fields: errs}
	}
	return out, nil
}

// Release returns a held hold's units to available.
func (s *Store) Release(ctx context.Context, id string, k orders.Keyed, fences orders.Fences) (orders.Reservation, map[string]int64, error) {
	var r orders.Reservation
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		row, lines, now, err := s.live(tx, id)
		if err != nil {
			return err
		}
		if after, err = s.returnUnits(tx, lines, fences, kindRelease, now); err != nil {
			return err
		}
		if err := s.endHold(tx, id, orders.HoldReleased, now, nil); err != nil {
			return err
		}
		if err := record(tx, k.Key, k.Hash, orders.Outcome{ReservationID: id}, s.now()); err != nil {
			return err
		}
		ended := stamp(now)
		row.Status, row.EndedAt = string(orders.HoldReleased), &ended
		r = row.reservation(lines, now)
		return nil
	})
	return r, after, unavailable("release", conflict(err))
}

// Extend moves a held hold's expiry to the database's time plus ttl, never
// earlier than it was.
func (s *Store) Extend(ctx context.Context, id string, ttl time.Duration, k orders.Keyed) (orders.Reservation, bool, error) {
	var r orders.Reservation
	var moved bool
	err := s.tx(ctx, func(tx *gorm.DB) error {
		moved = false // a retried transaction decides again
		row, lines, now, err := s.live(tx, id)
		if err != nil {
			return err
		}
		if until := stamp(now.Add(ttl)); until.After(row.ExpiresAt) {
			if err := tx.Model(&holdRow{}).Where("id = ?", id).Update("expires_at", until).Error; err != nil {
				return err
			}
			row.ExpiresAt, moved = until, true
		}
		if err := record(tx, k.Key, k.Hash, orders.Outcome{ReservationID: id}, s.now()); err != nil {
			return err
		}
		r = row.reservation(lines, now)
		return nil
	})
	return r, moved, unavailable("extend", conflict(err))
}

// Expired returns up to limit holds past their expiry and not yet swept, the
// earliest first, with their lines.
func (s *Store) Expired(ctx context.Context, limit int) ([]orders.Reservation, error) {
	var out []orders.Reservation
	err := s.tx(ctx, func(tx *gorm.DB) error {
		now, err := s.clock(tx)
		if err != nil {
			return err
		}
		var rows []holdRow
		if err := tx.Where("status = ? AND expires_at <= ?", orders.HoldHeld, now).Order("expires_at").Limit(limit).Find(&rows).Error; err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		byHold, err := linesOf(tx, ids)
		if err != nil {
			return err
		}
		for _, r := range rows {
			out = append(out, r.reservation(byHold[r.ID], now))
		}
		return nil
	})
	return out, unavailable("expired holds", err)
}

func linesOf(tx *gorm.DB, ids []string) (map[string][]holdLineRow, error) {
	var lines []holdLineRow
	if err := tx.Where("reservation_id IN ?", ids).Order("reservation_id, sku").Find(&lines).Error; err != nil {
		return nil, err
	}
	out := make(map[string][]holdLineRow, len(ids))
	for _, l := range lines {
		out[l.HoldID] = append(out[l.HoldID], l)
	}
	return out, nil
}

// Expire ends those of the holds ids that are still held and past their
// expiry (a hold confirmed, released or extended meanwhile is left be), and
// returns their units to available, under the sweeper's lease (leader) and the
// per-SKU tokens (fences). It returns how many it expired and the available
// stock after.
func (s *Store) Expire(ctx context.Context, ids []string, fences orders.Fences, leader orders.Leader) (int, map[string]int64, error) {
	var n int
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		now, err := s.clock(tx)
		if err != nil {
			return err
		}
		var due []string
		if err := tx.Model(&holdRow{}).Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).
			Where("id IN ? AND status = ? AND expires_at <= ?", ids, orders.HoldHeld, now).Order("id").Pluck("id", &due).Error; err != nil {
			return err
		}
		if len(due) == 0 {
			return nil
		}
		byHold, err := linesOf(tx, due)
		if err != nil {
			return err
		}
		var lines []holdLineRow
		for _, id := range due {
			lines = append(lines, byHold[id]...)
		}
		if after, err = s.returnUnits(tx, lines, fences, kindExpire, now); err != nil {
			return err
		}
		ended := stamp(now)
		if err := tx.Model(&holdRow{}).Where("id IN ?", due).
			Updates(map[string]any{"status": string(orders.HoldExpired), "ended_at": ended}).Error; err != nil {
			return err
		}
		n = len(due)
		return nil
	})
	return n, after, unavailable("expire holds", err)
}

// returnUnits moves the lines' units from reserved back to available, one
// fenced update per SKU (in SKU order, as every writer locks rows), with a
// ledger entry per line, and returns the available stock after.
func (s *Store) returnUnits(tx *gorm.DB, lines []holdLineRow, fences orders.Fences, kind string, now time.Time) (map[string]int64, error) {
	sum := map[string]int64{}
	ledger := make([]ledgerRow, len(lines))
	for i, l := range lines {
		sum[l.SKU] += l.Quantity
		ledger[i] = ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kind, HoldID: &lines[i].HoldID, Fence: fences[l.SKU], CreatedAt: stamp(now)}
	}
	skus := make([]string, 0, len(sum))
	for sku := range sum {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	for _, sku := range skus {
		if err := s.shift(tx, sku, delta{available: sum[sku], reserved: -sum[sku]}, fences[sku]); err != nil {
			return nil, err
		}
	}
	if err := createAll(tx, ledger); err != nil {
		return nil, err
	}
	return available(tx, skus)
}

func (s *Store) endHold(tx *gorm.DB, id string, status orders.HoldStatus, now time.Time, orderID *string) error {
	return tx.Model(&holdRow{}).Where("id = ?", id).
		Updates(map[string]any{"status": string(status), "ended_at": stamp(now), "order_id": orderID}).Error
}

// HoldAudit counts the holds still held past their expiry plus grace (I6) and,
// when deep, the orders made from a hold that are not its one confirmed order
// (I7).
func (s *Store) HoldAudit(ctx context.Context, grace time.Duration, deep bool) (orders.HoldAudit, error) {
	var a orders.HoldAudit
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		a, err = s.holdAudit(tx, grace, deep)
		return err
	})
	return a, unavailable("hold audit", err)
}

func (s *Store) holdAudit(tx *gorm.DB, grace time.Duration, deep bool) (orders.HoldAudit, error) {
	a := orders.HoldAudit{Stray: -1}
	now, err := s.clock(tx)
	if err != nil {
		return a, err
	}
	if err := tx.Model(&holdRow{}).Where("status = ? AND expires_at < ?", orders.HoldHeld, now.Add(-grace)).
		Count(&a.Overdue).Error; err != nil {
		return a, err
	}
	if !deep {
		return a, nil
	}
	err = tx.Raw(`SELECT COUNT(*) FROM orders o LEFT JOIN reservations r ON r.id = o.reservation_id
WHERE o.reservation_id IS NOT NULL AND (r.id IS NULL OR r.status <> ? OR r.order_id IS NULL OR r.order_id <> o.id)`,
		orders.HoldConfirmed).Row().Scan(&a.Stray)
	return a, err
}

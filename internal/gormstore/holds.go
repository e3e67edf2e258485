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

// hold adds a hold's row, lines and ledger entries; it expires at clock (the
// database's) plus its time to live, which it sets in p.Hold for the caller.
func (r *inserts) hold(p orders.Placement, fences orders.Fences, clock time.Time) {
	o := p.Order
	p.Hold.ExpiresAt = stamp(clock.Add(p.Hold.TTL))
	r.holds = append(r.holds, holdRow{ID: o.ID, Status: string(orders.HoldHeld), CreatedAt: o.CreatedAt, ExpiresAt: p.Hold.ExpiresAt,
		ClientID: o.ClientID, Customer: o.Customer})
	for _, it := range o.Items {
		r.holdLines = append(r.holdLines, holdLineRow{HoldID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)})
		r.ledger = append(r.ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindHold, HoldID: &o.ID,
			Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
	}
}

// Reservation returns one hold; a hold past its expiry reads expired.
func (s *Store) Reservation(ctx context.Context, id string) (orders.Reservation, error) {
	holds, err := s.Holds(ctx, []string{id})
	if err != nil {
		return orders.Reservation{}, err
	}
	r, ok := holds[id]
	if !ok {
		return orders.Reservation{}, orders.ErrNotFound
	}
	db, cancel := s.conn(ctx)
	defer cancel()
	allocs, err := allocationsOf(db, []string{id})
	if err != nil {
		return orders.Reservation{}, unavailable("hold allocations", err)
	}
	r.Allocations = allocationsIn(allocs[id])
	return r, nil
}

// Holds returns those of the holds ids that exist, read as Reservation reads
// one. No transaction: a hold's lines never change, and the holds, their
// lines and the database's time are read in one statement: every confirm and
// release reads its hold so before it is served (lock-batch: one read per
// batch), and three statements per hold were most of a confirm's cost to the
// database.
func (s *Store) Holds(ctx context.Context, ids []string) (map[string]orders.Reservation, error) {
	if len(ids) == 0 {
		return map[string]orders.Reservation{}, nil
	}
	db, cancel := s.conn(ctx)
	defer cancel()
	clock := s.clockSQL(db)
	if clock == "" {
		clock = "NULL" // the store's own clock, below
	}
	rows, err := db.Raw("SELECT r.id, r.status, r.created_at, r.expires_at, r.ended_at, r.order_id, r.client_id, r.customer, l.sku, l.quantity, "+clock+
		" FROM reservations r LEFT JOIN reservation_lines l ON l.reservation_id = r.id WHERE r.id IN ? ORDER BY r.id, l.sku", ids).Rows()
	if err != nil {
		return nil, unavailable("reservations", err)
	}
	defer func() { _ = rows.Close() }()
	var order []string
	byID := map[string]*holdRow{}
	lines := map[string][]holdLineRow{}
	var dbNow *time.Time
	for rows.Next() {
		var row holdRow
		var sku *string
		var qty *int64
		if err := rows.Scan(&row.ID, &row.Status, &row.CreatedAt, &row.ExpiresAt, &row.EndedAt, &row.OrderID, &row.ClientID, &row.Customer, &sku, &qty, &dbNow); err != nil {
			return nil, unavailable("reservations", err)
		}
		if _, seen := byID[row.ID]; !seen {
			byID[row.ID] = &row
			order = append(order, row.ID)
		}
		if sku != nil && qty != nil {
			lines[row.ID] = append(lines[row.ID], holdLineRow{HoldID: row.ID, SKU: *sku, Quantity: *qty})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("reservations", err)
	}
	now := s.now()
	if dbNow != nil {
		now = dbNow.UTC()
	}
	out := make(map[string]orders.Reservation, len(order))
	for _, id := range order {
		out[id] = byID[id].reservation(lines[id], now)
	}
	return out, nil
}

// Reservations lists up to limit holds before the hold id before (all when
// empty), newest first (hold ids are time-sortable), with their lines.
func (s *Store) Reservations(ctx context.Context, owner, before string, limit int) ([]orders.Reservation, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []holdRow
	q := db.Order("id DESC").Limit(limit)
	if owner != "" {
		q = q.Where("client_id = ?", owner)
	}
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
		Items: make([]orders.Item, len(lines)), ClientID: r.ClientID, Customer: r.Customer}
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

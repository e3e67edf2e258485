package gormstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// End ends holds in one transaction (see orders.Store): each ending is
// decided on its own, on the database's clock read once, and refused before it
// writes anything; what the endings change is then written together: each
// SKU's counters once, by the sum of the endings, in SKU order (as every
// writer locks rows), and the ledger, the orders and their lines in bulk. The
// hold rows are locked and ended one by one as they are decided, so that a
// second ending of one hold in the same batch sees the first.
func (s *Store) End(ctx context.Context, es []orders.Ending, fences orders.Fences) ([]orders.Ended, map[string]int64, error) {
	var out []orders.Ended
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		now, err := s.clock(tx)
		if err != nil {
			return err
		}
		w := endings{store: s, tx: tx, now: now, fences: fences, sum: map[string]delta{}}
		out = make([]orders.Ended, len(es)) // a retried transaction decides again
		for i, e := range es {
			switch {
			case e.Confirm != nil:
				out[i], err = w.confirm(*e.Confirm)
			case e.Release != nil:
				out[i], err = w.release(*e.Release)
			case e.Expire != nil:
				out[i], err = w.expire(*e.Expire)
			default:
				return errors.New("end: an ending with nothing set")
			}
			if err != nil {
				return err
			}
		}
		after, err = w.write()
		return err
	})
	if err != nil {
		return nil, nil, unavailable("end holds", conflict(err))
	}
	return out, after, nil
}

// endings is one End transaction's work: what its endings decided, to write
// together.
type endings struct {
	store  *Store
	tx     *gorm.DB
	now    time.Time
	fences orders.Fences

	sum    map[string]delta
	ledger []ledgerRow
	orders []orderRow
	lines  []lineRow
}

// refused says whether err is an ending's own refusal (its Ended.Err), rather
// than a failure of the transaction.
func refused(err error) bool {
	var ended *orders.HoldEndedError
	return errors.As(err, &ended) || errors.Is(err, orders.ErrNotFound) || errors.Is(err, orders.ErrInvalid) ||
		errors.Is(err, orders.ErrStaleLeader)
}

// decided sorts err: an ending's refusal goes in its Ended, anything else
// fails the transaction.
func decided(err error) (orders.Ended, error) {
	if refused(err) {
		return orders.Ended{Err: err}, nil
	}
	return orders.Ended{}, err
}

// live locks a hold and returns it if it is held and not past its expiry;
// else a *HoldEndedError (or ErrNotFound).
func (w *endings) live(id string) (holdRow, []holdLineRow, error) {
	row, lines, err := readHold(w.tx, id, true)
	if err != nil {
		return row, nil, err
	}
	if r := row.reservation(lines, w.now); r.Status != orders.HoldHeld {
		return row, nil, &orders.HoldEndedError{ID: id, Status: r.Status, OrderID: r.OrderID}
	}
	return row, lines, nil
}

// confirm makes a held hold's units an order: the units confirmed move from
// reserved to sold, the rest back to available, never checked against
// available (they were set aside).
func (w *endings) confirm(c orders.Confirmation) (orders.Ended, error) {
	row, lines, err := w.live(c.HoldID)
	if err != nil {
		return decided(err)
	}
	confirm, err := confirmed(lines, c.Order.Items)
	if err != nil {
		return decided(err)
	}
	o := c.Order
	o.Items, o.ReservationID = nil, c.HoldID
	for _, l := range lines {
		if n := confirm[l.SKU]; n > 0 {
			o.Items = append(o.Items, orders.Item{SKU: l.SKU, Quantity: int(n)})
		}
	}
	if len(o.Items) == 0 {
		return decided(&orders.ValidationError{Fields: []orders.FieldError{{Field: "items", Message: "a confirm needs at least one unit"}}})
	}
	for _, l := range lines {
		n := confirm[l.SKU]
		w.add(l.SKU, delta{available: l.Quantity - n, reserved: -l.Quantity, sold: n})
		if l.Quantity > n {
			w.ledger = append(w.ledger, ledgerRow{SKU: l.SKU, Delta: l.Quantity - n, Kind: kindRelease, HoldID: &row.ID,
				Fence: w.fences[l.SKU], CreatedAt: stamp(w.now)})
		}
	}
	if err := w.store.endHold(w.tx, row.ID, orders.HoldConfirmed, w.now, &o.ID); err != nil {
		return orders.Ended{}, err
	}
	// The order's lines, with no sale in the ledger: available did not change.
	orow, olines := orderRows(o)
	w.orders = append(w.orders, orow)
	w.lines = append(w.lines, olines...)
	if err := record(w.tx, c.Key, c.Hash, orders.Outcome{OrderID: o.ID}, w.store.now()); err != nil {
		return orders.Ended{}, err
	}
	return orders.Ended{Order: o}, nil
}

// release returns a held hold's units to available.
func (w *endings) release(r orders.Release) (orders.Ended, error) {
	row, lines, err := w.live(r.HoldID)
	if err != nil {
		return decided(err)
	}
	w.giveBack(lines, kindRelease)
	if err := w.store.endHold(w.tx, r.HoldID, orders.HoldReleased, w.now, nil); err != nil {
		return orders.Ended{}, err
	}
	if err := record(w.tx, r.Key, r.Hash, orders.Outcome{ReservationID: r.HoldID}, w.store.now()); err != nil {
		return orders.Ended{}, err
	}
	ended := stamp(w.now)
	row.Status, row.EndedAt = string(orders.HoldReleased), &ended
	return orders.Ended{Reservation: row.reservation(lines, w.now)}, nil
}

// expire ends those of the holds still held and past their expiry (one
// confirmed, released or extended meanwhile is left be), under the sweeper's
// lease, and returns their units to available.
func (w *endings) expire(x orders.Expiry) (orders.Ended, error) {
	if err := w.store.lead(w.tx, x.Leader); err != nil {
		return decided(err)
	}
	if len(x.HoldIDs) == 0 {
		return orders.Ended{}, nil
	}
	var due []string
	if err := w.tx.Model(&holdRow{}).Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).
		Where("id IN ? AND status = ? AND expires_at <= ?", x.HoldIDs, orders.HoldHeld, w.now).Order("id").Pluck("id", &due).Error; err != nil {
		return orders.Ended{}, err
	}
	if len(due) == 0 {
		return orders.Ended{}, nil
	}
	byHold, err := linesOf(w.tx, due)
	if err != nil {
		return orders.Ended{}, err
	}
	for _, id := range due {
		w.giveBack(byHold[id], kindExpire)
	}
	if err := w.tx.Model(&holdRow{}).Where("id IN ?", due).
		Updates(map[string]any{"status": string(orders.HoldExpired), "ended_at": stamp(w.now)}).Error; err != nil {
		return orders.Ended{}, err
	}
	return orders.Ended{Expired: len(due)}, nil
}

// giveBack moves the lines' units from reserved back to available, with a
// ledger entry per line.
func (w *endings) giveBack(lines []holdLineRow, kind string) {
	for i, l := range lines {
		w.add(l.SKU, delta{available: l.Quantity, reserved: -l.Quantity})
		w.ledger = append(w.ledger, ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kind, HoldID: &lines[i].HoldID,
			Fence: w.fences[l.SKU], CreatedAt: stamp(w.now)})
	}
}

func (w *endings) add(sku string, d delta) {
	t := w.sum[sku]
	t.available += d.available
	t.reserved += d.reserved
	t.sold += d.sold
	w.sum[sku] = t
}

// write changes each SKU's counters once (fenced, in SKU order), writes the
// ledger and the orders, and returns the available stock after.
func (w *endings) write() (map[string]int64, error) {
	skus := slices.Sorted(maps.Keys(w.sum))
	if len(skus) == 0 {
		return nil, nil
	}
	for _, sku := range skus {
		if err := w.store.shift(w.tx, sku, w.sum[sku], w.fences[sku]); err != nil {
			return nil, err
		}
	}
	if err := createAll(w.tx, w.orders); err != nil {
		return nil, err
	}
	if err := createAll(w.tx, w.lines); err != nil {
		return nil, err
	}
	if err := createAll(w.tx, w.ledger); err != nil {
		return nil, err
	}
	return available(w.tx, skus)
}

// one ends one hold alone: its refusal becomes End's error.
func (s *Store) one(ctx context.Context, e orders.Ending, fences orders.Fences) (orders.Ended, map[string]int64, error) {
	out, after, err := s.End(ctx, []orders.Ending{e}, fences)
	if err != nil {
		return orders.Ended{}, nil, err
	}
	if out[0].Err != nil {
		return out[0], nil, unavailable("end hold", out[0].Err)
	}
	return out[0], after, nil
}

// Confirm is End of one confirm.
func (s *Store) Confirm(ctx context.Context, c orders.Confirmation, fences orders.Fences) (orders.Order, map[string]int64, error) {
	out, after, err := s.one(ctx, orders.Ending{Confirm: &c}, fences)
	return out.Order, after, err
}

// Release is End of one release.
func (s *Store) Release(ctx context.Context, id string, k orders.Keyed, fences orders.Fences) (orders.Reservation, map[string]int64, error) {
	out, after, err := s.one(ctx, orders.Ending{Release: &orders.Release{HoldID: id, Keyed: k}}, fences)
	return out.Reservation, after, err
}

// Expire is End of one expiry.
func (s *Store) Expire(ctx context.Context, ids []string, fences orders.Fences, leader orders.Leader) (int, map[string]int64, error) {
	out, after, err := s.one(ctx, orders.Ending{Expire: &orders.Expiry{HoldIDs: ids, Leader: leader}}, fences)
	return out.Expired, after, err
}

package gormstore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// End ends holds in one transaction (see orders.Store): it is CommitChanges
// (changes.go) without placements. Its number of statements does not grow
// with the endings: every hold they name is read and locked at once (in id
// order), each ending is then decided on its own, in order, on those rows and
// the database's clock read once (a later ending of a hold sees an earlier
// one's end), and refused before it writes anything; what they change is
// written together: each SKU's counters once, by the sum, in SKU order (as
// every writer locks rows), the holds' ends, the orders, the ledger and the
// keys' records in bulk. One statement per ending was 0.32× the orders' rate
// on a hot SKU.
func (s *Store) End(ctx context.Context, es []orders.Ending, fences orders.Fences) ([]orders.Ended, map[string]int64, error) {
	var out []orders.Ended
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		out, after, err = s.writeChanges(tx, orders.Changes{Endings: es}, fences)
		return err
	})
	if err != nil {
		return nil, nil, unavailable("end holds", conflict(err))
	}
	return out, after, nil
}

// endings is one write's work (writeChanges, changes.go): the holds its
// endings name, as they stand after the endings decided so far, and what its
// placements and those endings decided, to write together.
type endings struct {
	store  *Store
	tx     *gorm.DB
	now    time.Time
	fences orders.Fences

	holds map[string]*holdRow // locked; nil for none
	lines map[string][]holdLineRow
	ended []*holdRow // those of holds these endings ended, as they end

	sum       map[string]delta               // the endings' changes of each SKU's counters
	backs     []giveBack                     // the endings' units, to go back or be sold where they are (allocate.go)
	confirmed map[string][]orders.Allocation // the confirms' orders' allocations, by order id, once written
	loc       map[skuLoc]delta               // the changes of each SKU's location rows (allocate.go)
	caps      capTally                       // what the endings give back of the caps' counters
	events    outbox                         // the placements', then the endings'
	rows      inserts                        // likewise
	recorded  time.Time
}

// endings reads the database's time when a hold is placed or ended, reads and
// locks every hold es name, with their lines, and adds b's rows and events.
func (s *Store) endings(tx *gorm.DB, b orders.Batch, es []orders.Ending, fences orders.Fences) (*endings, error) {
	w := &endings{store: s, tx: tx, fences: fences, holds: map[string]*holdRow{},
		sum: map[string]delta{}, events: *placedEvents(b.Placed), recorded: s.now()}
	if len(es) > 0 || holding(b.Placed) {
		var err error
		if w.now, err = s.clock(tx); err != nil {
			return nil, err
		}
	}
	w.rows.place(b, fences, w.now, w.recorded)
	var ids []string
	for _, e := range es {
		switch {
		case e.Confirm != nil:
			ids = append(ids, e.Confirm.HoldID)
		case e.Release != nil:
			ids = append(ids, e.Release.HoldID)
		case e.Expire != nil:
			ids = append(ids, e.Expire.HoldIDs...)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return w, nil
	}
	var rows []holdRow
	if err := tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Where("id IN ?", ids).Order("id").Find(&rows).Error; err != nil {
		return nil, err
	}
	for i := range rows {
		w.holds[rows[i].ID] = &rows[i]
	}
	var err error
	if w.lines, err = linesOf(tx, ids); err != nil {
		return nil, err
	}
	return w, nil
}

// decide decides each ending on its own, in order: its answer, or its
// refusal in Ended.Err; an error fails the write.
func (w *endings) decide(es []orders.Ending) ([]orders.Ended, error) {
	out := make([]orders.Ended, len(es))
	for i, e := range es {
		switch {
		case e.Confirm != nil:
			out[i] = w.confirm(*e.Confirm)
		case e.Release != nil:
			out[i] = w.release(*e.Release)
		case e.Expire != nil:
			var err error
			if out[i], err = w.expire(*e.Expire); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("end: an ending with nothing set")
		}
	}
	return out, nil
}

// live returns a hold if it is held and not past its expiry, as this
// transaction's endings left it; else a *HoldEndedError (or ErrNotFound, for
// one that does not exist or is not owner's, said before anything else of
// it).
func (w *endings) live(id, owner string) (*holdRow, []holdLineRow, error) {
	row := w.holds[id]
	if row == nil || (owner != "" && row.ClientID != owner) {
		return nil, nil, orders.ErrNotFound
	}
	if r := row.reservation(w.lines[id], w.now); r.Status != orders.HoldHeld {
		return nil, nil, &orders.HoldEndedError{ID: id, Status: r.Status, OrderID: r.OrderID}
	}
	return row, w.lines[id], nil
}

// end marks a hold ended as of now, for the endings after it and for write.
func (w *endings) end(row *holdRow, status orders.HoldStatus, orderID *string) {
	at := stamp(w.now)
	row.Status, row.EndedAt, row.OrderID = string(status), &at, orderID
	w.ended = append(w.ended, row)
}

func (w *endings) record(key, hash string, o orders.Outcome) {
	if key == "" {
		return
	}
	row := idempotencyRow{Key: key, Hash: hash, CreatedAt: w.recorded, UpdatedAt: w.recorded}
	if o.OrderID != "" {
		row.OrderID = &o.OrderID
	}
	if o.ReservationID != "" {
		row.HoldID = &o.ReservationID
	}
	w.rows.records = append(w.rows.records, row)
}

// confirm makes a held hold's units an order: the units confirmed move from
// reserved to sold, the rest back to available, never checked against
// available (they were set aside).
func (w *endings) confirm(c orders.Confirmation) orders.Ended {
	row, lines, err := w.live(c.HoldID, c.Owner)
	if err != nil {
		return orders.Ended{Err: err}
	}
	confirm, err := confirmed(lines, c.Order.Items)
	if err != nil {
		return orders.Ended{Err: err}
	}
	o := c.Order
	o.Items, o.ReservationID = nil, c.HoldID
	o.ClientID, o.Customer = row.ClientID, row.Customer // the hold's: its owner confirms it
	for _, l := range lines {
		if n := confirm[l.SKU]; n > 0 {
			o.Items = append(o.Items, orders.Item{SKU: l.SKU, Quantity: int(n)})
		}
	}
	if len(o.Items) == 0 {
		return orders.Ended{Err: &orders.ValidationError{Fields: []orders.FieldError{{Field: "items", Message: "a confirm needs at least one unit"}}}}
	}
	id := o.ID
	for _, l := range lines {
		n := confirm[l.SKU]
		w.backs = append(w.backs, giveBack{hold: row.ID, order: id, sku: l.SKU, quantity: l.Quantity, sold: n})
		d := delta{available: l.Quantity - n, reserved: -l.Quantity, sold: n}
		w.add(l.SKU, d)
		w.events.add(l.SKU, orders.EventReservationConfirmed, l.Quantity, d, &id, &row.ID)
		if l.Quantity > n {
			w.rows.ledger = append(w.rows.ledger, ledgerRow{SKU: l.SKU, Delta: l.Quantity - n, Kind: kindRelease, HoldID: &row.ID,
				Fence: w.fences[l.SKU], CreatedAt: stamp(w.now)})
		}
		// Held no more; the customer's units confirmed stay, now ordered.
		w.caps.addHeld(row.ClientID, l.SKU, l.Quantity)
		w.caps.addUnits(l.SKU, row.ClientID, row.Customer, l.Quantity-n)
	}
	w.end(row, orders.HoldConfirmed, &id)
	// The order's lines, with no sale in the ledger: available did not change.
	orow, olines := orderRows(o)
	w.rows.orders = append(w.rows.orders, orow)
	w.rows.lines = append(w.rows.lines, olines...)
	w.record(c.Key, c.Hash, orders.Outcome{OrderID: o.ID})
	return orders.Ended{Order: o}
}

// release returns a held hold's units to available.
func (w *endings) release(r orders.Release) orders.Ended {
	row, lines, err := w.live(r.HoldID, r.Owner)
	if err != nil {
		return orders.Ended{Err: err}
	}
	w.giveBack(row, lines, kindRelease, orders.EventReservationReleased)
	w.end(row, orders.HoldReleased, nil)
	w.record(r.Key, r.Hash, orders.Outcome{ReservationID: r.HoldID})
	return orders.Ended{Reservation: row.reservation(lines, w.now)}
}

// expire ends those of the holds still held and past their expiry (one
// confirmed, released or extended meanwhile is left be), under the sweeper's
// lease, and returns their units to available.
func (w *endings) expire(x orders.Expiry) (orders.Ended, error) {
	if err := w.store.lead(w.tx, x.Leader); err != nil {
		if errors.Is(err, orders.ErrStaleLeader) {
			return orders.Ended{Err: err}, nil
		}
		return orders.Ended{}, err
	}
	n := 0
	for _, id := range x.HoldIDs {
		row := w.holds[id]
		if row == nil || row.Status != string(orders.HoldHeld) || row.ExpiresAt.After(w.now) {
			continue
		}
		w.giveBack(row, w.lines[id], kindExpire, orders.EventReservationExpired)
		w.end(row, orders.HoldExpired, nil)
		n++
	}
	return orders.Ended{Expired: n}, nil
}

// giveBack moves the lines' units from reserved back to available, with a
// ledger entry and an event per line, and out of the hold's client's and
// customer's counters.
func (w *endings) giveBack(row *holdRow, lines []holdLineRow, kind string, typ orders.EventType) {
	for i, l := range lines {
		w.caps.addHeld(row.ClientID, l.SKU, l.Quantity)
		w.caps.addUnits(l.SKU, row.ClientID, row.Customer, l.Quantity)
		d := delta{available: l.Quantity, reserved: -l.Quantity}
		w.add(l.SKU, d)
		w.backs = append(w.backs, giveBack{hold: row.ID, sku: l.SKU, quantity: l.Quantity})
		w.events.add(l.SKU, typ, l.Quantity, d, nil, &lines[i].HoldID)
		w.rows.ledger = append(w.rows.ledger, ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kind, HoldID: &lines[i].HoldID,
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

// endHolds writes the holds' ends: one statement per status, a confirmed
// hold's order id chosen by a CASE.
func (w *endings) endHolds() error {
	byStatus := map[string][]*holdRow{}
	for _, row := range w.ended {
		byStatus[row.Status] = append(byStatus[row.Status], row)
	}
	at := stamp(w.now)
	for _, st := range slices.Sorted(maps.Keys(byStatus)) {
		rows := byStatus[st]
		slices.SortFunc(rows, func(a, b *holdRow) int { return strings.Compare(a.ID, b.ID) })
		ids := make([]string, len(rows))
		for i, row := range rows {
			ids[i] = row.ID
		}
		if st != string(orders.HoldConfirmed) {
			if err := w.tx.Model(&holdRow{}).Where("id IN ?", ids).Updates(map[string]any{"status": st, "ended_at": at}).Error; err != nil {
				return err
			}
			continue
		}
		var q strings.Builder
		args := make([]any, 0, 2*len(rows)+3)
		q.WriteString("UPDATE reservations SET status = ?, ended_at = ?, order_id = CASE id")
		args = append(args, st, at)
		for _, row := range rows {
			q.WriteString(" WHEN ? THEN ?")
			args = append(args, row.ID, *row.OrderID)
		}
		q.WriteString(" END WHERE id IN ?")
		args = append(args, ids)
		if err := w.tx.Exec(q.String(), args...).Error; err != nil {
			return err
		}
	}
	return nil
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

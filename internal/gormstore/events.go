package gormstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// The outbox. Every write that changes a SKU's counters collects one event per
// change and SKU (outbox.add) before it changes them, bumps each SKU's event_seq
// by its number of events in the same guarded update that changes the counters
// (so a SKU's events are numbered with no gap, and a rolled-back write numbers
// none), reads the counters after, as it already did, and inserts the events
// with the counters after each one in one multi-row INSERT. The SKU's row lock,
// held from that update to the commit, orders a SKU's events: the one numbered
// n+1 is written after the one numbered n committed, so its id is larger.
//
// The stock-level events (orders.Crossings) are known only from the counters
// after: a SKU's available before the write is the one after minus the net
// change of its events (or what the write read, for one that sets rather
// than moves it: outbox.before). When a write crossed a level, a second
// statement bumps the SKU's event_seq by the number of those events, still
// under the row lock the update took, and they are numbered after the
// write's change events; a write that crosses nothing sends no statement
// more.

// eventRow is one event. Its id, from the database's sequence at its insert,
// is its place in the feed (feed.go), and no column is written after the
// insert: what a destination has had is one cursor per destination
// (cursorRow), not a column per event, since every destination takes the feed
// in order.
type eventRow struct {
	ID         int64     `gorm:"column:id;primaryKey;autoIncrement"`
	SKU        string    `gorm:"column:sku;size:64;not null"`
	Seq        int64     `gorm:"column:seq;not null"`
	Type       string    `gorm:"column:type;size:32;not null"`
	Quantity   int64     `gorm:"column:quantity;not null"`
	DAvailable int64     `gorm:"column:d_available;not null"`
	DReserved  int64     `gorm:"column:d_reserved;not null"`
	DSold      int64     `gorm:"column:d_sold;not null"`
	DStocked   int64     `gorm:"column:d_stocked;not null"`
	Available  int64     `gorm:"column:available;not null"`
	Reserved   int64     `gorm:"column:reserved;not null"`
	Sold       int64     `gorm:"column:sold;not null"`
	Stocked    int64     `gorm:"column:stocked;not null"`
	OrderID    *string   `gorm:"column:order_id;size:40"`
	HoldID     *string   `gorm:"column:reservation_id;size:40"`
	CreatedAt  time.Time `gorm:"column:created_at;not null"`
	// Location is the location an event of one location is about ("": the SKU's).
	Location string `gorm:"column:location;size:64;not null;default:''"`

	created any `gorm:"-"` // what values writes as created_at
}

func (eventRow) TableName() string { return "stock_events" }

func (eventRow) columns() string {
	return "(sku, seq, type, quantity, d_available, d_reserved, d_sold, d_stocked, " +
		"available, reserved, sold, stocked, order_id, reservation_id, location, created_at)"
}

// values' created_at is the database's clock (created, below), or the
// store's when it has no clock of its own.
func (r eventRow) values() []any {
	return []any{r.SKU, r.Seq, r.Type, r.Quantity, r.DAvailable, r.DReserved, r.DSold, r.DStocked,
		r.Available, r.Reserved, r.Sold, r.Stocked, r.OrderID, r.HoldID, r.Location, r.created}
}

func (r eventRow) event() orders.Event {
	e := orders.Event{Type: orders.EventType(r.Type), SKU: r.SKU, Seq: r.Seq, Quantity: r.Quantity,
		Change:   orders.Levels{Available: r.DAvailable, Reserved: r.DReserved, Sold: r.DSold, Stocked: r.DStocked},
		Counters: orders.Levels{Available: r.Available, Reserved: r.Reserved, Sold: r.Sold, Stocked: r.Stocked},
		Location: r.Location, CreatedAt: r.CreatedAt.UTC()}
	e.Position, e.ID = r.ID, orders.EventID(r.ID)
	if r.OrderID != nil {
		e.OrderID = *r.OrderID
	}
	if r.HoldID != nil {
		e.ReservationID = *r.HoldID
	}
	return e
}

// outbox collects a write's events, in the order of its changes.
type outbox struct {
	rows  []eventRow
	count map[string]int64 // change events per SKU: what the guarded update bumps event_seq by
	// late counts the events per SKU added after the guarded update (the
	// stock-level events, cross), which number bumps event_seq by.
	late map[string]int64
	// before is the available stock a SKU had before a write that does not
	// move it by its events' changes (CommitUnguarded's); otherwise it is
	// the one after minus their net change.
	before map[string]int64
	// created are the SKUs the write created: a new SKU crosses no level,
	// having had none before.
	created map[string]bool
}

// add records one change of sku's counters by d.
func (o *outbox) add(sku string, typ orders.EventType, quantity int64, d delta, orderID, holdID *string) {
	if o.count == nil {
		o.count = map[string]int64{}
	}
	o.count[sku]++
	o.rows = append(o.rows, eventRow{SKU: sku, Type: string(typ), Quantity: quantity,
		DAvailable: d.available, DReserved: d.reserved, DSold: d.sold, DStocked: d.stocked, OrderID: orderID, HoldID: holdID})
}

// at says the last event added is about one location of its SKU.
func (o *outbox) at(location string) { o.rows[len(o.rows)-1].Location = location }

// cross adds the stock-level events of a move of the available stock of sku
// (in location: "" for the SKU's total) from before to after, under
// threshold (orders.Crossings), after the write's guarded update: number
// bumps the SKU's event_seq by them and numbers them after its change events,
// with the counters after the write and no change. A write calls it for a
// location's counts; the SKU's total is number's own.
func (o *outbox) cross(sku, location string, before, after int64, threshold *int64) {
	for _, e := range orders.Crossings(sku, location, before, after, threshold) {
		if o.late == nil {
			o.late = map[string]int64{}
		}
		o.late[sku]++
		o.rows = append(o.rows, eventRow{SKU: sku, Type: string(e.Type), Quantity: e.Quantity, Location: e.Location})
	}
}

// setFrom records that the write set sku's available stock from before, read
// in its transaction under the row's lock, rather than moved it by its
// events' changes.
func (o *outbox) setFrom(sku string, before int64) {
	if o.before == nil {
		o.before = map[string]int64{}
	}
	o.before[sku] = before
}

// creates records that the write created sku.
func (o *outbox) creates(sku string) {
	if o.created == nil {
		o.created = map[string]bool{}
	}
	o.created[sku] = true
}

// crossings adds the stock-level events of each SKU's total (after: the
// rows as the write left them), then bumps the event_seq of every SKU with
// events added after its guarded update by their number, in SKU order, in
// after too: a statement per such SKU, under the row lock the write holds.
func (o *outbox) crossings(tx *gorm.DB, after map[string]skuRow) error {
	net := make(map[string]int64, len(o.count))
	for _, r := range o.rows {
		net[r.SKU] += r.DAvailable
	}
	for _, sku := range slices.Sorted(maps.Keys(o.count)) {
		row, ok := after[sku]
		if !ok || o.created[sku] {
			continue
		}
		before, set := o.before[sku]
		if !set {
			before = row.Available - net[sku]
		}
		o.cross(sku, "", before, row.Available, row.LowStockThreshold)
	}
	for _, sku := range slices.Sorted(maps.Keys(o.late)) {
		row, ok := after[sku]
		if !ok {
			return fmt.Errorf("events: sku %s not read after its change", sku)
		}
		n := o.late[sku]
		if err := tx.Exec("UPDATE skus SET event_seq = event_seq + ? WHERE sku = ?", n, sku).Error; err != nil {
			return err
		}
		row.EventSeq += n
		after[sku] = row
	}
	return nil
}

// write numbers the events and sets each one's counters after it from the
// SKUs' rows as the write left them (after: read after its updates, in its
// transaction), walking each SKU's events back from the last; then inserts
// them, stamped with the database's clock.
func (o *outbox) write(s *Store, tx *gorm.DB, after map[string]skuRow) error {
	if ok, err := o.number(s, tx, after); !ok || err != nil {
		return err
	}
	return o.insert(s, tx)
}

// carried is write for a write that inserts rows after its events: on
// PostgreSQL, the events' INSERT is returned to lead one of the write's INSERT
// statements (insertAll), so that they cost no round trip of their own;
// elsewhere they are inserted now and carried is nil.
func (o *outbox) carried(s *Store, tx *gorm.DB, after map[string]skuRow) (*leading, error) {
	if ok, err := o.number(s, tx, after); !ok || err != nil {
		return nil, err
	}
	if tx.Name() != "postgres" || s.eventsOutside || len(o.rows) > insertRows {
		return nil, o.insert(s, tx)
	}
	return lead(o.rows), nil
}

// number numbers the events and sets their counters and clock; false when
// there is nothing to write.
func (o *outbox) number(s *Store, tx *gorm.DB, after map[string]skuRow) (bool, error) {
	if len(o.rows) == 0 || s.noEvents {
		return false, nil
	}
	if err := o.crossings(tx, after); err != nil {
		return false, err
	}
	var created any = s.now()
	if q := s.clockSQL(tx); q != "" {
		created = sqlExpr(q)
	}
	next := make(map[string]skuRow, len(o.count))
	for i := len(o.rows) - 1; i >= 0; i-- {
		r := &o.rows[i]
		cur, ok := next[r.SKU]
		if !ok {
			if cur, ok = after[r.SKU]; !ok {
				return false, fmt.Errorf("events: sku %s not read after its change", r.SKU)
			}
		}
		r.Seq, r.Available, r.Reserved, r.Sold, r.Stocked = cur.EventSeq, cur.Available, cur.Reserved, cur.Sold, cur.Stocked
		r.created = created
		cur.EventSeq--
		cur.Available -= r.DAvailable
		cur.Reserved -= r.DReserved
		cur.Sold -= r.DSold
		cur.Stocked -= r.DStocked
		next[r.SKU] = cur
	}
	return true, nil
}

// insert inserts the numbered events in the write's transaction (outside it
// with eventsOutside: tests only).
func (o *outbox) insert(s *Store, tx *gorm.DB) error {
	if s.eventsOutside {
		tx = s.db.WithContext(tx.Statement.Context)
	}
	return createAll(tx, o.rows)
}

// counters reads the SKUs' rows in a write's transaction, after its updates.
func counters(tx *gorm.DB, skus []string) (map[string]skuRow, error) {
	var rows []skuRow
	if err := tx.Where("sku IN ?", skus).Find(&rows).Error; err != nil {
		return nil, err
	}
	out := make(map[string]skuRow, len(rows))
	for _, r := range rows {
		out[r.SKU] = r
	}
	return out, nil
}

// availableOf is the available stock of the rows.
func availableOf(rows map[string]skuRow) map[string]int64 {
	out := make(map[string]int64, len(rows))
	for sku, r := range rows {
		out[sku] = r.Available
	}
	return out
}

// cursorRow is how far a destination has had the feed: every event placed at
// or before Through.
type cursorRow struct {
	Name    string `gorm:"column:name;primaryKey;size:64"`
	Through int64  `gorm:"column:through;not null"`
}

func (cursorRow) TableName() string { return "event_cursors" }

// The relay's side.

// Delivered reads how far destination has had the feed: 0 for none yet.
func (s *Store) Delivered(ctx context.Context, destination string) (int64, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	through, err := readCursor(db, destination)
	return through, unavailable("read event cursor", err)
}

// MarkDelivered moves destination's cursor from from to through: a
// compare-and-set, so that a relay that read the cursor before an operator
// rewound it does not move it past the events to deliver again.
func (s *Store) MarkDelivered(ctx context.Context, destination string, from, through int64, leader orders.Leader) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		res := tx.Exec("UPDATE event_cursors SET through = ? WHERE name = ? AND through = ?", through, destination, from)
		if res.Error != nil || res.RowsAffected == 1 {
			return res.Error
		}
		var rows []cursorRow
		if err := tx.Where("name = ?", destination).Limit(1).Find(&rows).Error; err != nil {
			return err
		}
		switch {
		case len(rows) == 0 && from == 0:
			return tx.Create(&cursorRow{Name: destination, Through: through}).Error
		case len(rows) == 1 && rows[0].Through == through:
			return nil // MySQL counts a row set to what it was as not affected
		}
		return fmt.Errorf("%w: %s is not at %d", orders.ErrCursorMoved, destination, from)
	})
	if errors.Is(err, orders.ErrCursorMoved) {
		return err
	}
	return unavailable("mark events delivered", err)
}

// RewindDelivered moves destination's cursor back to to, and returns where it
// was.
func (s *Store) RewindDelivered(ctx context.Context, destination string, to int64) (int64, error) {
	var was int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		if was, err = readCursor(tx, destination); err != nil {
			return err
		}
		if to > was {
			return fmt.Errorf("%w: the cursor of %s is at %d, before %d: nothing to deliver again", orders.ErrInvalid, destination, was, to)
		}
		return tx.Exec("UPDATE event_cursors SET through = ? WHERE name = ?", to, destination).Error
	})
	return was, unavailable("rewind events delivered", err)
}

// Events lists up to limit events after position after and at or before the
// feed's end, in feed order: one range read of the primary key.
func (s *Store) Events(ctx context.Context, after int64, limit int) ([]orders.Event, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	out, err := readEvents(db, after, limit)
	return out, unavailable("list events", err)
}

// eventColumns are what readEvents scans, in eventRow's order.
const eventColumns = "id, sku, seq, type, quantity, d_available, d_reserved, d_sold, d_stocked, " +
	"available, reserved, sold, stocked, order_id, reservation_id, location, created_at"

// readEvents reads events in feed order with a scan of its own rather than
// GORM's Find, which reflects on every field of every row: the relay reads
// every event once, and this was most of its cost.
func readEvents(db *gorm.DB, after int64, limit int) ([]orders.Event, error) {
	rows, err := db.Raw("SELECT "+eventColumns+" FROM stock_events WHERE id > ? AND id <= "+
		"(SELECT through FROM event_cursors WHERE name = ?) ORDER BY id LIMIT ?", after, FeedEnd, limit).Rows()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := make([]orders.Event, 0, limit)
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.ID, &r.SKU, &r.Seq, &r.Type, &r.Quantity, &r.DAvailable, &r.DReserved, &r.DSold, &r.DStocked,
			&r.Available, &r.Reserved, &r.Sold, &r.Stocked, &r.OrderID, &r.HoldID, &r.Location, &r.CreatedAt); err != nil {
			return nil, err
		}
		out = append(out, r.event())
	}
	return out, rows.Err()
}

// EventBacklog counts the events committed after position after, in the
// feed or not yet, and reads the oldest one's time: two index reads.
func (s *Store) EventBacklog(ctx context.Context, after int64) (orders.Backlog, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var b orders.Backlog
	if err := db.Model(&eventRow{}).Where("id > ?", after).Count(&b.Events).Error; err != nil {
		return b, unavailable("event backlog", err)
	}
	if b.Events == 0 {
		return b, nil
	}
	var first []eventRow
	if err := db.Select("id", "created_at").Where("id > ?", after).Order("id").Limit(1).Find(&first).Error; err != nil {
		return b, unavailable("event backlog", err)
	}
	if len(first) == 1 {
		b.Oldest = first[0].CreatedAt.UTC()
	}
	return b, nil
}

// PurgeEvents deletes up to limit events at or before through and the feed's
// end, and written before cutoff, oldest first. The last event is kept
// whatever its age: a database that counts its ids on from the largest one
// (SQLite without AUTOINCREMENT, MySQL before 8 after a restart) would give
// its id again, and every cursor past it (a webhook's, a feed reader's) would
// skip the new event.
func (s *Store) PurgeEvents(ctx context.Context, cutoff time.Time, through int64, limit int, leader orders.Leader) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		var last *int64
		if err := tx.Model(&eventRow{}).Select("MAX(id)").Scan(&last).Error; err != nil || last == nil {
			return err
		}
		end, err := readCursor(tx, FeedEnd)
		if err != nil {
			return err
		}
		through = min(through, *last-1, end)
		var ids []int64
		if err := tx.Model(&eventRow{}).Where("id <= ? AND created_at < ?", through, cutoff.UTC()).
			Order("id").Limit(limit).Pluck("id", &ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		res := tx.Exec("DELETE FROM stock_events WHERE id IN ?", ids)
		n = int(res.RowsAffected)
		if res.Error != nil {
			return res.Error
		}
		return moveCursor(tx, orders.CursorPurged, ids[len(ids)-1])
	})
	return n, unavailable("purge events", err)
}

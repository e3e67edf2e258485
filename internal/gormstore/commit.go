package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// Commit writes a batch of orders, holds and refusals in one transaction: it
// is CommitChanges (changes.go) without endings. Per SKU one guarded (and
// fenced, unless fences is nil) decrement by the batch's total, then every
// order's and hold's rows and every key's record. A hold's units go to
// reserved, an order's to sold; a hold's expiry is set from the database's
// clock.
func (s *Store) Commit(ctx context.Context, b orders.Batch, fences orders.Fences) (map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		var err error
		_, after, err = s.writeChanges(tx, orders.Changes{Batch: b}, fences)
		return err
	})
	return after, unavailable("commit", conflict(capped(err)))
}

// conflict names a duplicate key: an idempotency key recorded by a request that
// committed first (the rest of the transaction was rolled back with it).
func conflict(err error) error {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return fmt.Errorf("%w: %w", orders.ErrIdempotencyConflict, err)
	}
	return err
}

// total is what a batch takes of one SKU: units sold, and units held.
type total struct {
	sku            string
	sold, reserved int64
}

// totalsOf sums the placements' lines per SKU, sorted by SKU.
func totalsOf(ps []orders.Placement) []total {
	sum := map[string]*total{}
	for _, p := range ps {
		for _, it := range p.Order.Items {
			t := sum[it.SKU]
			if t == nil {
				t = &total{sku: it.SKU}
				sum[it.SKU] = t
			}
			if p.Hold != nil {
				t.reserved += int64(it.Quantity)
			} else {
				t.sold += int64(it.Quantity)
			}
		}
	}
	out := make([]total, 0, len(sum))
	for _, t := range sum {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b total) int { return strings.Compare(a.sku, b.sku) })
	return out
}

// placedEvents are the placements' events: one per placement and SKU (an
// order's items are one per SKU), in the batch's order.
func placedEvents(ps []orders.Placement) *outbox {
	ob := &outbox{}
	for _, p := range ps {
		o := p.Order
		for _, it := range o.Items {
			q := int64(it.Quantity)
			if p.Hold != nil {
				ob.add(it.SKU, orders.EventReservationCreated, q, delta{available: -q, reserved: q}, nil, &o.ID)
			} else {
				ob.add(it.SKU, orders.EventOrderPlaced, q, delta{available: -q, sold: q}, &o.ID, nil)
			}
		}
	}
	return ob
}

// insertRows is the most rows of one INSERT: below every dialect's limit on
// bound parameters.
const insertRows = 500

// insertBatch inserts the orders and holds, their lines and ledger entries,
// and a record for every keyed placement and refusal, after raising the caps'
// counters (caps.go): CommitUnguarded's, whose counters are its own.
func (s *Store) insertBatch(tx *gorm.DB, b orders.Batch, fences orders.Fences) error {
	events, err := placedCaps(b.Placed).raise(tx, nil)
	if err != nil {
		return err
	}
	var clock time.Time
	if holding(b.Placed) {
		if clock, err = s.clock(tx); err != nil {
			return err
		}
	}
	var r inserts
	r.place(b, fences, clock, s.now())
	return r.insert(tx, events)
}

// holding says whether any of ps is a hold.
func holding(ps []orders.Placement) bool {
	return slices.ContainsFunc(ps, func(p orders.Placement) bool { return p.Hold != nil })
}

// inserts are the rows a write inserts, each kind in one INSERT (per
// insertRows rows).
type inserts struct {
	ledger    []ledgerRow
	orders    []orderRow
	lines     []lineRow
	holds     []holdRow
	holdLines []holdLineRow
	records   []idempotencyRow
	// allocations are where the units of located SKUs came from (allocate.go).
	allocations []allocationRow
}

// place adds a batch's rows: its orders and holds, their lines and ledger
// entries, and a record (stamped recorded) for every keyed placement and
// refusal. A hold expires at clock (the database's) plus its time to live.
func (r *inserts) place(b orders.Batch, fences orders.Fences, clock, recorded time.Time) {
	for _, p := range b.Placed {
		o := p.Order
		rec := idempotencyRow{Key: p.Key, Hash: p.Hash, CreatedAt: recorded, UpdatedAt: recorded}
		if p.Hold != nil {
			r.hold(p, fences, clock)
			rec.HoldID = &o.ID
		} else {
			row, olines := orderRows(o)
			r.orders, r.lines = append(r.orders, row), append(r.lines, olines...)
			rec.OrderID = &o.ID
			for _, it := range o.Items {
				r.ledger = append(r.ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindSale, OrderID: &o.ID,
					Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
			}
		}
		if p.Key != "" {
			r.records = append(r.records, rec)
		}
	}
	for _, p := range b.Refused {
		short := slices.Clone(p.Short)
		slices.Sort(short)
		r.records = append(r.records, idempotencyRow{Key: p.Key, Hash: p.Hash, ShortSKUs: strings.Join(short, ","),
			CreatedAt: recorded, UpdatedAt: recorded})
	}
}

// insert inserts the rows, events (when not nil) leading the first INSERT.
// The ledger first: the events lead it, and it has about as many rows as they
// (one per line), so that the statements' shapes, which the driver caches one
// by one, are one per batch size and not one per pair of sizes.
func (r *inserts) insert(tx *gorm.DB, events *leading) error {
	return insertAll(tx, events, inserter(tx, r.ledger), inserter(tx, r.orders), inserter(tx, r.lines),
		inserter(tx, r.holds), inserter(tx, r.holdLines), inserter(tx, r.records), inserter(tx, r.allocations))
}

// insertAll runs the inserts in their order, events (when not nil) leading
// the first that has rows to insert, or alone when none has.
func insertAll(tx *gorm.DB, events *leading, inserts ...func(*leading) (bool, error)) error {
	for _, insert := range inserts {
		wrote, err := insert(events)
		if err != nil {
			return err
		}
		if wrote {
			events = nil
		}
	}
	return events.alone(tx)
}

// alone sends the WITH queries of l in a statement of their own (none for a
// nil l).
func (l *leading) alone(tx *gorm.DB) error {
	if l == nil {
		return nil
	}
	return exec(tx, append(append([]byte("WITH "), l.sql...), " SELECT 1"...), l.args)
}

// inserter inserts rows, led by the given INSERT; false when there were none
// (and the INSERT is left to the next).
func inserter[T row](tx *gorm.DB, rows []T) func(*leading) (bool, error) {
	return func(l *leading) (bool, error) {
		if len(rows) == 0 {
			return false, nil
		}
		return true, createAllAfter(tx, l, rows)
	}
}

// orderRows are an order's row and lines.
func orderRows(o orders.Order) (orderRow, []lineRow) {
	row := orderRow{ID: o.ID, Status: string(orders.StatusPlaced), CreatedAt: o.CreatedAt, ClientID: o.ClientID, Customer: o.Customer}
	if o.ReservationID != "" {
		row.HoldID = &o.ReservationID
	}
	lines := make([]lineRow, len(o.Items))
	for i, it := range o.Items {
		lines[i] = lineRow{OrderID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)}
	}
	return row, lines
}

// sqlExpr is a value createAll writes into the statement as SQL (the
// database's clock), not as a bound parameter.
type sqlExpr string

func isExpr(v any) bool { _, ok := v.(sqlExpr); return ok }

// row is a table's row as createAll inserts it: its columns, and its values
// in their order. An autoincrement id is left out, for the database to number.
type row interface {
	TableName() string
	columns() string // "(a, b, c)"
	values() []any
}

// createAll inserts rows, insertRows to a statement: a multi-row INSERT built
// here and sent on the transaction's connection, rather than GORM's Create,
// which reflects on every field of every row, builds the statement placeholder
// by placeholder and, on PostgreSQL, reads back the ids it numbered
// (RETURNING), which nothing reads. An error is translated as GORM's are: a
// duplicate key is gorm.ErrDuplicatedKey.
func createAll[T row](tx *gorm.DB, rows []T) error {
	return createAllAfter(tx, nil, rows)
}

// leading is writes that ride in front of an INSERT a write makes, as
// data-modifying WITH queries of its statement, rather than in round trips of
// their own (PostgreSQL only): a batch's events, and the changes of the caps'
// counters (caps.go). sql is the WITH list ("name AS (...), ..."); its bound
// parameters are numbered from $1, so that the statement it leads numbers on
// after them.
type leading struct {
	sql  []byte
	args []any
}

// lead builds rows' INSERT to lead another one (insertRows rows at most).
func lead[T row](rows []T) *leading {
	b := append([]byte(nil), "written_events AS ("...)
	b, args := appendInsert(b, nil, rows, true)
	return &leading{sql: append(b, ')'), args: args}
}

// with adds the WITH query name, built by query from the number of the
// parameters before its own (its first is $n+1), with its args.
func (l *leading) with(name string, query func(n int) string, args ...any) *leading {
	if l == nil {
		l = &leading{}
	}
	if len(l.sql) > 0 {
		l.sql = append(l.sql, ", "...)
	}
	l.sql = append(append(append(append(l.sql, name...), " AS ("...), query(len(l.args))...), ')')
	l.args = append(l.args, args...)
	return l
}

// createAllAfter is createAll with l, when not nil, in its first statement.
func createAllAfter[T row](tx *gorm.DB, l *leading, rows []T) error {
	numbered := tx.Name() == "postgres" // $1, $2, ...; the others take ?
	for chunk := range slices.Chunk(rows, insertRows) {
		var b []byte
		var args []any
		if l != nil {
			b = append(append(append(b, "WITH "...), l.sql...), ' ')
			args = l.args
			l = nil
		}
		b, args = appendInsert(b, args, chunk, numbered)
		if err := exec(tx, b, args); err != nil {
			return err
		}
	}
	return nil
}

// exec sends a statement built here on the transaction's connection; its
// error is translated as GORM's are.
func exec(tx *gorm.DB, q []byte, args []any) error {
	if _, err := tx.Statement.ConnPool.ExecContext(tx.Statement.Context, string(q), args...); err != nil {
		return translated(tx, err)
	}
	return nil
}

// appendInsert appends rows' multi-row INSERT to b and their values to args,
// numbering the placeholders on from len(args) when numbered.
func appendInsert[T row](b []byte, args []any, rows []T, numbered bool) ([]byte, []any) {
	var zero T
	cols := zero.columns()
	width := strings.Count(cols, ",") + 1
	b = slices.Grow(b, 32+len(zero.TableName())+len(cols)+len(rows)*width*6)
	b = append(b, "INSERT INTO "...)
	b = append(b, zero.TableName()...)
	b = append(b, ' ')
	b = append(b, cols...)
	b = append(b, " VALUES "...)
	args = slices.Grow(args, len(rows)*width)
	for i, r := range rows {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, '(')
		for j, v := range r.values() {
			if j > 0 {
				b = append(b, ", "...)
			}
			switch {
			case isExpr(v):
				b = append(b, v.(sqlExpr)...)
			case numbered:
				args = append(args, v)
				b = strconv.AppendInt(append(b, '$'), int64(len(args)), 10)
			default:
				args = append(args, v)
				b = append(b, '?')
			}
		}
		b = append(b, ')')
	}
	return b, args
}

// translated is err in GORM's words when the database was opened with
// TranslateError (Open does), as GORM's own calls return it.
func translated(db *gorm.DB, err error) error {
	if t, ok := db.Dialector.(gorm.ErrorTranslator); ok && db.TranslateError {
		return t.Translate(err)
	}
	return err
}

// CommitUnguarded is the unsafe strategy's read-modify-write: each SKU's stock
// is set to what the caller read (have) minus the order, whatever it is now, so
// two buyers of the last unit both succeed. It exists to show what the lock
// prevents. The order and its record are written as Commit writes them.
func (s *Store) CommitUnguarded(ctx context.Context, p orders.Placement, have map[string]int64) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		counter := "sold"
		if p.Hold != nil {
			counter = "reserved"
		}
		skus := make([]string, len(p.Order.Items))
		events := placedEvents([]orders.Placement{p})
		for i, it := range p.Order.Items {
			skus[i] = it.SKU
			if !s.noEvents {
				// What it overwrites, locked: its stock-level events are told
				// from it, not from what the caller read.
				var was skuRow
				if err := tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Select("sku", "available").
					Where("sku = ?", it.SKU).Take(&was).Error; err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
					return err
				}
				events.setFrom(it.SKU, was.Available)
			}
			if err := tx.Exec("UPDATE skus SET available = ?, "+counter+" = "+counter+" + ?, event_seq = event_seq + 1, updated_at = ? WHERE sku = ?",
				have[it.SKU]-int64(it.Quantity), it.Quantity, s.now(), it.SKU).Error; err != nil {
				return err
			}
		}
		placed := []orders.Placement{p}
		if err := s.insertBatch(tx, orders.Batch{Placed: placed}, nil); err != nil {
			return err
		}
		// Its events say the change it meant; the counters after, what it did.
		rows, err := counters(tx, skus)
		if err != nil {
			return err
		}
		return events.write(s, tx, rows)
	})
	return unavailable("commit unguarded", conflict(capped(err)))
}

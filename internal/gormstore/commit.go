package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Commit writes a batch of orders, holds and refusals in one transaction: per
// SKU one guarded (and fenced, unless fences is nil) decrement by the batch's
// total, then every order's and hold's rows and every key's record. A hold's
// units go to reserved, an order's to sold; a hold's expiry is set from the
// database's clock.
func (s *Store) Commit(ctx context.Context, b orders.Batch, fences orders.Fences) (map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		totals := totalsOf(b.Placed)
		returned := map[string]skuRow{}
		if err := s.decrement(tx, totals, fences, returned); err != nil {
			return err
		}
		var events *leading
		if len(totals) > 0 {
			rows, err := countersAfter(tx, skusOf(totals), returned)
			if err != nil {
				return err
			}
			after = availableOf(rows)
			if events, err = placedEvents(b.Placed).carried(s, tx, rows); err != nil {
				return err
			}
		}
		return s.insertBatch(tx, b, fences, events)
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

// decrement takes totals (sorted by SKU, so that concurrent transactions lock
// rows in one order) off the stock with guarded updates, fenced unless fences is
// nil, and counts them sold; or says why it cannot.
func (s *Store) decrement(tx *gorm.DB, totals []total, fences orders.Fences, after map[string]skuRow) error {
	now := s.now()
	for i, it := range totals {
		var affected int64
		var err error
		n := it.sold + it.reserved
		if fences == nil {
			affected, err = update(tx, "UPDATE skus SET available = available - ?, sold = sold + ?, reserved = reserved + ?, event_seq = event_seq + ?, updated_at = ? "+
				"WHERE sku = ? AND available >= ?", []any{n, it.sold, it.reserved, it.events, now, it.sku, n}, after)
		} else {
			tok := fences[it.sku]
			affected, err = update(tx, "UPDATE skus SET available = available - ?, sold = sold + ?, reserved = reserved + ?, event_seq = event_seq + ?, fence = ?, updated_at = ? "+
				"WHERE sku = ? AND available >= ? AND fence < ?", []any{n, it.sold, it.reserved, it.events, tok, now, it.sku, n, tok}, after)
		}
		if err != nil {
			return err
		}
		if affected == 0 {
			// The SKUs before this one were updated in this transaction (their
			// fence is now the caller's own): only this one and the rest are judged.
			return whyRefused(tx, totals[i:], fences)
		}
	}
	return nil
}

// whyRefused tells a stale fence from missing stock after a guarded update
// touched no row. A stale fence wins: the caller is not the holder any more, or
// its token repeats one committed (the caller may advance it and try again).
func whyRefused(tx *gorm.DB, items []total, fences orders.Fences) error {
	var rows []skuRow
	if err := tx.Where("sku IN ?", skusOf(items)).Find(&rows).Error; err != nil {
		return err
	}
	bySKU := make(map[string]skuRow, len(rows))
	for _, r := range rows {
		bySKU[r.SKU] = r
	}
	short := &orders.InsufficientStockError{Available: map[string]int64{}}
	for _, it := range items {
		r, ok := bySKU[it.sku]
		if ok && fences != nil && r.Fence >= fences[it.sku] {
			return &orders.StaleFenceError{SKU: it.sku, Token: fences[it.sku], Last: r.Fence}
		}
		if !ok || r.Available < it.sold+it.reserved {
			short.SKUs = append(short.SKUs, it.sku)
			short.Available[it.sku] = max(r.Available, 0)
		}
	}
	if len(short.SKUs) == 0 {
		return errors.New("guarded update refused for no visible reason")
	}
	return short
}

// total is what a batch takes of one SKU: units sold, and units held, by
// events placements (one each).
type total struct {
	sku            string
	sold, reserved int64
	events         int64
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
			t.events++
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

func skusOf(totals []total) []string {
	out := make([]string, len(totals))
	for i, t := range totals {
		out[i] = t.sku
	}
	return out
}

// insertRows is the most rows of one INSERT: below every dialect's limit on
// bound parameters.
const insertRows = 500

// insertBatch inserts the orders and holds, their lines and ledger entries,
// and a record for every keyed placement and refusal; events, when not nil,
// in the ledger's statement.
//
// The caps' counters (caps.go) are raised first: on PostgreSQL they join the
// events in front of the first INSERT.
func (s *Store) insertBatch(tx *gorm.DB, b orders.Batch, fences orders.Fences, events *leading) error {
	events, err := placedCaps(b.Placed).raise(tx, events)
	if err != nil {
		return err
	}
	now := s.now()
	var rows []orderRow
	var lines []lineRow
	var ledger []ledgerRow
	var records []idempotencyRow
	var holds []orders.Placement
	for _, p := range b.Placed {
		o := p.Order
		if p.Hold != nil {
			holds = append(holds, p)
			if p.Key != "" {
				records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, HoldID: &o.ID, CreatedAt: now, UpdatedAt: now})
			}
			continue
		}
		row, olines := orderRows(o)
		rows, lines = append(rows, row), append(lines, olines...)
		if p.Key != "" {
			records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, OrderID: &o.ID, CreatedAt: now, UpdatedAt: now})
		}
		for _, it := range o.Items {
			ledger = append(ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindSale, OrderID: &o.ID,
				Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
		}
	}
	holdRows, holdLines, holdLedger, err := s.insertHolds(tx, holds, fences)
	if err != nil {
		return err
	}
	ledger = append(ledger, holdLedger...)
	for _, p := range b.Refused {
		short := slices.Clone(p.Short)
		slices.Sort(short)
		records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, ShortSKUs: strings.Join(short, ","), CreatedAt: now, UpdatedAt: now})
	}
	// The ledger first: the events lead it, and it has as many rows as they
	// (one per line), so that the statements' shapes, which the driver caches
	// one by one, are one per batch size and not one per pair of sizes.
	return insertAll(tx, events, inserter(tx, ledger), inserter(tx, rows), inserter(tx, lines), inserter(tx, holdRows),
		inserter(tx, holdLines), inserter(tx, records))
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
		for i, it := range p.Order.Items {
			skus[i] = it.SKU
			if err := tx.Exec("UPDATE skus SET available = ?, "+counter+" = "+counter+" + ?, event_seq = event_seq + 1, updated_at = ? WHERE sku = ?",
				have[it.SKU]-int64(it.Quantity), it.Quantity, s.now(), it.SKU).Error; err != nil {
				return err
			}
		}
		placed := []orders.Placement{p}
		if err := s.insertBatch(tx, orders.Batch{Placed: placed}, nil, nil); err != nil {
			return err
		}
		// Its events say the change it meant; the counters after, what it did.
		rows, err := counters(tx, skus)
		if err != nil {
			return err
		}
		return placedEvents(placed).write(s, tx, rows)
	})
	return unavailable("commit unguarded", conflict(capped(err)))
}

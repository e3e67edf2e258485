package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Commit writes a batch of orders and refusals in one transaction: per SKU one
// guarded (and fenced, unless fences is nil) decrement by the batch's total,
// then every order's rows and every key's record.
func (s *Store) Commit(ctx context.Context, b orders.Batch, fences orders.Fences) (map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		totals := totalsOf(b.Placed)
		if err := s.decrement(tx, totals, fences); err != nil {
			return err
		}
		if err := insertBatch(tx, b, fences, s.now()); err != nil {
			return err
		}
		if len(totals) == 0 {
			return nil
		}
		var err error
		after, err = available(tx, orders.SKUs(totals))
		return err
	})
	return after, unavailable("commit", conflict(err))
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
func (s *Store) decrement(tx *gorm.DB, totals []orders.Item, fences orders.Fences) error {
	now := s.now()
	for i, it := range totals {
		var res *gorm.DB
		if fences == nil {
			res = tx.Exec("UPDATE skus SET available = available - ?, sold = sold + ?, updated_at = ? WHERE sku = ? AND available >= ?",
				it.Quantity, it.Quantity, now, it.SKU, it.Quantity)
		} else {
			tok := fences[it.SKU]
			res = tx.Exec("UPDATE skus SET available = available - ?, sold = sold + ?, fence = ?, updated_at = ? "+
				"WHERE sku = ? AND available >= ? AND fence < ?", it.Quantity, it.Quantity, tok, now, it.SKU, it.Quantity, tok)
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
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
func whyRefused(tx *gorm.DB, items []orders.Item, fences orders.Fences) error {
	var rows []skuRow
	if err := tx.Where("sku IN ?", orders.SKUs(items)).Find(&rows).Error; err != nil {
		return err
	}
	bySKU := make(map[string]skuRow, len(rows))
	for _, r := range rows {
		bySKU[r.SKU] = r
	}
	var short []string
	for _, it := range items {
		r, ok := bySKU[it.SKU]
		if ok && fences != nil && r.Fence >= fences[it.SKU] {
			return &orders.StaleFenceError{SKU: it.SKU, Token: fences[it.SKU], Last: r.Fence}
		}
		if !ok || r.Available < int64(it.Quantity) {
			short = append(short, it.SKU)
		}
	}
	if len(short) == 0 {
		return errors.New("guarded update refused for no visible reason")
	}
	return &orders.InsufficientStockError{SKUs: short}
}

// totalsOf sums the placements' lines per SKU, sorted by SKU.
func totalsOf(ps []orders.Placement) []orders.Item {
	sum := map[string]int{}
	for _, p := range ps {
		for _, it := range p.Order.Items {
			sum[it.SKU] += it.Quantity
		}
	}
	out := make([]orders.Item, 0, len(sum))
	for sku, q := range sum {
		out = append(out, orders.Item{SKU: sku, Quantity: q})
	}
	slices.SortFunc(out, func(a, b orders.Item) int { return strings.Compare(a.SKU, b.SKU) })
	return out
}

// insertRows is the most rows of one INSERT: below every dialect's limit on
// bound parameters.
const insertRows = 500

// insertBatch inserts the orders, their lines and ledger entries, and a record
// for every keyed placement and refusal.
func insertBatch(tx *gorm.DB, b orders.Batch, fences orders.Fences, now time.Time) error {
	var rows []orderRow
	var lines []lineRow
	var ledger []ledgerRow
	var records []idempotencyRow
	for _, p := range b.Placed {
		o := p.Order
		rows = append(rows, orderRow{ID: o.ID, Status: string(orders.StatusPlaced), CreatedAt: o.CreatedAt})
		if p.Key != "" {
			records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, OrderID: &o.ID, CreatedAt: now, UpdatedAt: now})
		}
		for _, it := range o.Items {
			lines = append(lines, lineRow{OrderID: o.ID, SKU: it.SKU, Quantity: int64(it.Quantity)})
			ledger = append(ledger, ledgerRow{SKU: it.SKU, Delta: -int64(it.Quantity), Kind: kindSale, OrderID: &o.ID,
				Fence: fences[it.SKU], CreatedAt: o.CreatedAt})
		}
	}
	for _, p := range b.Refused {
		short := slices.Clone(p.Short)
		slices.Sort(short)
		records = append(records, idempotencyRow{Key: p.Key, Hash: p.Hash, ShortSKUs: strings.Join(short, ","), CreatedAt: now, UpdatedAt: now})
	}
	for _, insert := range []func() error{
		func() error { return createAll(tx, rows) }, func() error { return createAll(tx, lines) },
		func() error { return createAll(tx, ledger) }, func() error { return createAll(tx, records) },
	} {
		if err := insert(); err != nil {
			return err
		}
	}
	return nil
}

func createAll[T any](tx *gorm.DB, rows []T) error {
	if len(rows) == 0 {
		return nil
	}
	return tx.CreateInBatches(&rows, insertRows).Error
}

// CommitUnguarded is the unsafe strategy's read-modify-write: each SKU's stock
// is set to what the caller read (have) minus the order, whatever it is now, so
// two buyers of the last unit both succeed. It exists to show what the lock
// prevents. The order and its record are written as Commit writes them.
func (s *Store) CommitUnguarded(ctx context.Context, p orders.Placement, have map[string]int64) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		for _, it := range p.Order.Items {
			if err := tx.Exec("UPDATE skus SET available = ?, sold = sold + ?, updated_at = ? WHERE sku = ?",
				have[it.SKU]-int64(it.Quantity), it.Quantity, s.now(), it.SKU).Error; err != nil {
				return err
			}
		}
		return insertBatch(tx, orders.Batch{Placed: []orders.Placement{p}}, nil, s.now())
	})
	return unavailable("commit unguarded", conflict(err))
}

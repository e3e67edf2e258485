package gormstore

import (
	"fmt"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/stockguard/stockguard/internal/orders"
)

// A SKU's counters (available, reserved, sold, stocked: one row of skus) change
// together, in one guarded (and fenced) statement, whatever changes them: a
// cancel, a restock or set, a confirm, a release, an expiry. An order's and a
// hold's decrement, batched per SKU, is commit.go's.

// delta is a change of a SKU's counters.
type delta struct{ available, reserved, sold, stocked int64 }

// shift changes a SKU's counters by d in one guarded update (available and
// reserved stay >= 0), fenced unless fence is orders.NoFence (a lock without
// tokens, as lock-polling's), and numbers its events (the number of the
// write's events of the SKU, in its outbox). It returns gorm.ErrRecordNotFound
// for a SKU that does not exist.
//
// Where the database can (returning), the update returns the row as it left
// it, into after, so that the write need not read it again.
func (s *Store) shift(tx *gorm.DB, sku string, d delta, fence, events int64, after map[string]skuRow) error {
	if d == (delta{}) && fence == orders.NoFence && events == 0 {
		// A shift that changes nothing only locks the row: as an UPDATE, MySQL
		// would count the row it leaves as it was as no row, a refusal.
		return tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Where("sku = ?", sku).Take(&skuRow{}).Error
	}
	n, err := s.shiftBy(tx, sku, d, -d.available, 0, fence, events, after)
	if err != nil || n == 1 {
		return err
	}
	var row skuRow
	if err := tx.Where("sku = ?", sku).Take(&row).Error; err != nil {
		return err // gorm.ErrRecordNotFound for a new SKU
	}
	if fence != orders.NoFence && row.Fence >= fence {
		return &orders.StaleFenceError{SKU: sku, Token: fence, Last: row.Fence}
	}
	if row.Available+row.BackorderLimit+d.available < 0 {
		return &orders.InsufficientStockError{SKUs: []string{sku}, Available: map[string]int64{sku: max(row.Available, 0)}}
	}
	return fmt.Errorf("sku %s: reserved %d cannot change by %d", sku, row.Reserved, d.reserved)
}

// shiftBy is shift's guarded update, with available plus the SKU's
// backorder limit guarded to be at least atLeast before it (-d.available:
// never below minus the limit after it, unless a write asks for more), and
// available itself at least held (what holds take: they set aside units
// that are there, never backordered ones); it returns how many rows it
// changed (0: refused).
func (s *Store) shiftBy(tx *gorm.DB, sku string, d delta, atLeast, held, fence, events int64, after map[string]skuRow) (int64, error) {
	set := "available = available + ?, reserved = reserved + ?, sold = sold + ?, stocked = stocked + ?, event_seq = event_seq + ?, updated_at = ?"
	args := []any{d.available, d.reserved, d.sold, d.stocked, events, s.now()}
	where := " WHERE sku = ? AND available + backorder_limit >= ? AND reserved >= ?"
	wargs := []any{sku, atLeast, -d.reserved}
	if held > 0 {
		where += " AND available >= ?"
		wargs = append(wargs, held)
	}
	if fence != orders.NoFence {
		set += ", fence = ?"
		args = append(args, fence)
		where += " AND fence < ?"
		wargs = append(wargs, fence)
	}
	return update(tx, "UPDATE skus SET "+set+where, append(args, wargs...), after)
}

// skuColumns are what an update of skus returns, where it can.
const skuColumns = " RETURNING sku, available, reserved, sold, stocked, fence, event_seq, locations, low_stock_threshold, backorder_limit"

// returning says whether the database returns the rows an UPDATE changed
// (MySQL does not; MariaDB's RETURNING is for INSERT and DELETE only).
func returning(tx *gorm.DB) bool { return tx.Name() == "postgres" || tx.Name() == "sqlite" }

// update runs an UPDATE of skus and returns how many rows it changed; where
// the database can, it puts the rows as it left them into after.
func update(tx *gorm.DB, q string, args []any, after map[string]skuRow) (int64, error) {
	if !returning(tx) || after == nil {
		res := tx.Exec(q, args...)
		return res.RowsAffected, res.Error
	}
	var rows []skuRow
	if err := tx.Raw(q+skuColumns, args...).Scan(&rows).Error; err != nil {
		return 0, err
	}
	for _, r := range rows {
		after[r.SKU] = r
	}
	return int64(len(rows)), nil
}

// countersAfter is the SKUs' rows after a write's updates: those the updates
// returned, or read in its transaction where they could not.
func countersAfter(tx *gorm.DB, skus []string, after map[string]skuRow) (map[string]skuRow, error) {
	for _, sku := range skus {
		if _, ok := after[sku]; !ok {
			return counters(tx, skus)
		}
	}
	return after, nil
}

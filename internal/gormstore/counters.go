package gormstore

import (
	"fmt"

	"gorm.io/gorm"

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
func (s *Store) shift(tx *gorm.DB, sku string, d delta, fence, events int64) error {
	set := "available = available + ?, reserved = reserved + ?, sold = sold + ?, stocked = stocked + ?, event_seq = event_seq + ?, updated_at = ?"
	args := []any{d.available, d.reserved, d.sold, d.stocked, events, s.now()}
	where := " WHERE sku = ? AND available >= ? AND reserved >= ?"
	wargs := []any{sku, -d.available, -d.reserved}
	if fence != orders.NoFence {
		set += ", fence = ?"
		args = append(args, fence)
		where += " AND fence < ?"
		wargs = append(wargs, fence)
	}
	res := tx.Exec("UPDATE skus SET "+set+where, append(args, wargs...)...)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	var row skuRow
	if err := tx.Where("sku = ?", sku).Take(&row).Error; err != nil {
		return err // gorm.ErrRecordNotFound for a new SKU
	}
	if fence != orders.NoFence && row.Fence >= fence {
		return &orders.StaleFenceError{SKU: sku, Token: fence, Last: row.Fence}
	}
	if row.Available+d.available < 0 {
		return &orders.InsufficientStockError{SKUs: []string{sku}, Available: map[string]int64{sku: max(row.Available, 0)}}
	}
	return fmt.Errorf("sku %s: reserved %d cannot change by %d", sku, row.Reserved, d.reserved)
}

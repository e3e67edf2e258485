package gormstore

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Cancel marks a placed order cancelled and returns its stock, fenced.
func (s *Store) Cancel(ctx context.Context, id string, fences orders.Fences, at time.Time) (orders.Order, map[string]int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Model(&orderRow{}).Where("id = ? AND status = ?", id, orders.StatusPlaced).
			Updates(map[string]any{"status": orders.StatusCancelled, "cancelled_at": at.UTC()})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var n int64
			if err := tx.Model(&orderRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return orders.ErrNotFound
			}
			return orders.ErrAlreadyCancelled
		}
		var lines []lineRow
		if err := tx.Where("order_id = ?", id).Order("sku").Find(&lines).Error; err != nil {
			return err
		}
		skus := make([]string, len(lines))
		for i, l := range lines {
			skus[i] = l.SKU
			if err := s.addStock(tx, l.SKU, l.Quantity, fences[l.SKU], "sold = sold - ?"); err != nil {
				return err
			}
			entry := ledgerRow{SKU: l.SKU, Delta: l.Quantity, Kind: kindCancel, OrderID: &id, Fence: fences[l.SKU], CreatedAt: at.UTC()}
			if err := tx.Create(&entry).Error; err != nil {
				return err
			}
		}
		var err error
		after, err = available(tx, skus)
		return err
	})
	if err != nil {
		return orders.Order{}, nil, unavailable("cancel", err)
	}
	o, err := s.Order(ctx, id)
	return o, after, err
}

// addStock adds quantity to an existing SKU's available stock and changes
// counter by it too (a set clause with one parameter), fenced unless fence is 0
// (a lock without fencing tokens, as lock-polling's: pkg/lock never issues 0).
func (s *Store) addStock(tx *gorm.DB, sku string, quantity, fence int64, counter string) error {
	var res *gorm.DB
	if fence == 0 {
		res = tx.Exec("UPDATE skus SET available = available + ?, "+counter+", updated_at = ? WHERE sku = ?",
			quantity, quantity, s.now(), sku)
	} else {
		res = tx.Exec("UPDATE skus SET available = available + ?, "+counter+", fence = ?, updated_at = ? WHERE sku = ? AND fence < ?",
			quantity, quantity, fence, s.now(), sku, fence)
	}
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 1 {
		return nil
	}
	var row skuRow
	if err := tx.Where("sku = ?", sku).Take(&row).Error; err != nil {
		return err // gorm.ErrRecordNotFound for a new SKU
	}
	return &orders.StaleFenceError{SKU: sku, Token: fence, Last: row.Fence}
}

// Restock adds stock, creating the SKU if new, fenced, with a ledger entry.
func (s *Store) Restock(ctx context.Context, sku string, quantity, fence int64) (int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		err := s.addStock(tx, sku, quantity, fence, "stocked = stocked + ?")
		if errors.Is(err, gorm.ErrRecordNotFound) {
			err = tx.Create(&skuRow{SKU: sku, Available: quantity, Stocked: quantity, Fence: fence, UpdatedAt: s.now()}).Error
		}
		if err != nil {
			return err
		}
		entry := ledgerRow{SKU: sku, Delta: quantity, Kind: kindRestock, Fence: fence, CreatedAt: s.now()}
		if err := tx.Create(&entry).Error; err != nil {
			return err
		}
		after, err = available(tx, []string{sku})
		return err
	})
	return after[sku], unavailable("restock", err)
}

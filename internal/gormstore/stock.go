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
			if err := s.shift(tx, l.SKU, delta{available: l.Quantity, sold: -l.Quantity}, fences[l.SKU]); err != nil {
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

// Restock adds stock, creating the SKU if new, fenced, with a ledger entry.
func (s *Store) Restock(ctx context.Context, sku string, quantity, fence int64) (int64, error) {
	var after map[string]int64
	err := s.tx(ctx, func(tx *gorm.DB) error {
		err := s.shift(tx, sku, delta{available: quantity, stocked: quantity}, fence)
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

package gormstore

import (
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// lead checks the sweeper's lease: its token must be at least the last one
// written under the lease's name (the same leader writes many times under one
// token; a newer leader's is larger), and becomes the last one.
func (s *Store) lead(tx *gorm.DB, l orders.Leader) error {
	if l.Name == "" {
		return nil
	}
	for range 2 {
		res := tx.Exec("UPDATE leader_fences SET fence = ? WHERE name = ? AND fence <= ?", l.Token, l.Name, l.Token)
		if res.Error != nil || res.RowsAffected == 1 {
			return res.Error
		}
		var row leaderRow
		err := tx.Where("name = ?", l.Name).Take(&row).Error
		switch {
		case err == nil && row.Fence > l.Token:
			return fmt.Errorf("%w: %w", orders.ErrStaleLeader, &orders.StaleFenceError{SKU: l.Name, Token: l.Token, Last: row.Fence})
		case err == nil:
			return nil // MySQL counts a row set to what it was as not affected
		case !errors.Is(err, gorm.ErrRecordNotFound):
			return err
		}
		err = tx.Create(&leaderRow{Name: l.Name, Fence: l.Token}).Error
		if !errors.Is(err, gorm.ErrDuplicatedKey) {
			return err
		}
	}
	return errors.New("leader fence: row vanished")
}

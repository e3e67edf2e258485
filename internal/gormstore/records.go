package gormstore

import (
	"context"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Idempotency records: read by key, written in the transaction of the request
// they answer (record), forgotten after the retention.

// Outcomes returns the idempotency records of the keys that have one.
func (s *Store) Outcomes(ctx context.Context, keys []string) (map[string]orders.Record, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []idempotencyRow
	if err := db.Where("idem_key IN ?", keys).Find(&rows).Error; err != nil {
		return nil, unavailable("read idempotency keys", err)
	}
	out := make(map[string]orders.Record, len(rows))
	for _, r := range rows {
		rec := orders.Record{Hash: r.Hash, CreatedAt: r.CreatedAt.UTC()}
		if r.OrderID != nil {
			rec.Outcome.OrderID = *r.OrderID
		}
		if r.HoldID != nil {
			rec.Outcome.ReservationID = *r.HoldID
		}
		if r.ShortSKUs != "" {
			rec.Outcome.ShortSKUs = strings.Split(r.ShortSKUs, ",")
		}
		out[r.Key] = rec
	}
	return out, nil
}

// Forget deletes the records of keys written before cutoff.
func (s *Store) Forget(ctx context.Context, keys []string, cutoff time.Time) error {
	db, cancel := s.conn(ctx)
	defer cancel()
	err := db.Where("idem_key IN ? AND created_at < ?", keys, cutoff.UTC()).Delete(&idempotencyRow{}).Error
	return unavailable("forget idempotency keys", err)
}

// PurgeRecords deletes up to limit records written before cutoff, oldest first,
// and returns how many it deleted. The keys are read first and deleted by key:
// DELETE ... LIMIT is not portable.
// The sweeper's lease (leader) is checked in the same transaction.
func (s *Store) PurgeRecords(ctx context.Context, cutoff time.Time, limit int, leader orders.Leader) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		var keys []string
		if err := tx.Model(&idempotencyRow{}).Where("created_at < ?", cutoff.UTC()).Order("created_at").Limit(limit).
			Pluck("idem_key", &keys).Error; err != nil {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		res := tx.Where("idem_key IN ? AND created_at < ?", keys, cutoff.UTC()).Delete(&idempotencyRow{})
		n = int(res.RowsAffected)
		return res.Error
	})
	return n, unavailable("purge idempotency records", err)
}

// record writes an idempotency record, if there is a key.
func record(tx *gorm.DB, key, hash string, o orders.Outcome, now time.Time) error {
	if key == "" {
		return nil
	}
	row := idempotencyRow{Key: key, Hash: hash, CreatedAt: now, UpdatedAt: now}
	if o.OrderID != "" {
		row.OrderID = &o.OrderID
	}
	if o.ReservationID != "" {
		row.HoldID = &o.ReservationID
	}
	return tx.Create(&row).Error
}

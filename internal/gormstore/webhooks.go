package gormstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Webhook endpoints and their failed deliveries. An endpoint's cursor
// (position) is the feed position it has had every event through; the relay
// moves it forward under its lease, in the transaction that records the
// failures it moved past, so that a failure is recorded once with the move or
// not at all (and the event tried again by the next relay).

// webhookRow is one endpoint. DisabledAt set means disabled; FailingSince
// is the relay's first failed attempt with no success after it.
type webhookRow struct {
	ID             string     `gorm:"column:id;primaryKey;size:80"`
	URL            string     `gorm:"column:url;size:2048;not null"`
	Secret         string     `gorm:"column:secret;size:128;not null"`
	Position       int64      `gorm:"column:position;not null"`
	CreatedAt      time.Time  `gorm:"column:created_at;not null"`
	DisabledAt     *time.Time `gorm:"column:disabled_at"`
	DisabledReason string     `gorm:"column:disabled_reason;size:16;not null;default:''"`
	FailingSince   *time.Time `gorm:"column:failing_since"`
}

func (webhookRow) TableName() string { return "webhooks" }

func (r webhookRow) webhook() orders.Webhook {
	w := orders.Webhook{ID: r.ID, URL: r.URL, Secret: r.Secret, Position: r.Position, CreatedAt: r.CreatedAt.UTC(),
		Disabled: r.DisabledAt != nil, DisabledAt: utc(r.DisabledAt), FailingSince: utc(r.FailingSince)}
	if w.Disabled {
		w.DisabledReason = r.DisabledReason
	}
	return w
}

// utc is t in UTC, nil for nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// webhookRowV5 is the table as migration 5 made it: frozen here, so that
// migration 5 makes the same table whatever webhookRow becomes.
type webhookRowV5 struct {
	ID        string    `gorm:"column:id;primaryKey;size:80"`
	URL       string    `gorm:"column:url;size:2048;not null"`
	Secret    string    `gorm:"column:secret;size:128;not null"`
	Position  int64     `gorm:"column:position;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (webhookRowV5) TableName() string { return "webhooks" }

// webhookFailureRow is an event an endpoint was not delivered, one per
// endpoint and position.
type webhookFailureRow struct {
	WebhookID      string    `gorm:"column:webhook_id;primaryKey;size:80"`
	Position       int64     `gorm:"column:position;primaryKey;autoIncrement:false"`
	Attempts       int       `gorm:"column:attempts;not null"`
	LastError      string    `gorm:"column:last_error;size:1000;not null"`
	FirstAttemptAt time.Time `gorm:"column:first_attempt_at;not null"`
	FailedAt       time.Time `gorm:"column:failed_at;not null"`
}

func (webhookFailureRow) TableName() string { return "webhook_failures" }

func (r webhookFailureRow) failure() orders.WebhookFailure {
	return orders.WebhookFailure{WebhookID: r.WebhookID, EventID: orders.EventID(r.Position), Position: r.Position,
		Attempts: r.Attempts, LastError: r.LastError, FirstAttemptAt: r.FirstAttemptAt.UTC(), FailedAt: r.FailedAt.UTC()}
}

// maxLastError bounds a failure's error text to its column.
const maxLastError = 1000

// migrateV5 adds the webhook endpoints and their failed deliveries.
func migrateV5(tx *gorm.DB) error {
	return binTables(tx).Migrator().CreateTable(&webhookRowV5{}, &webhookFailureRow{})
}

// migrateV8 lets an endpoint be disabled: when (NULL: served), why, and
// since when the relay's attempts have failed with no success. Existing
// endpoints are served, with no failure counted.
func migrateV8(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	for _, f := range []string{"DisabledAt", "DisabledReason", "FailingSince"} {
		if err := m.AddColumn(&webhookRow{}, f); err != nil {
			return fmt.Errorf("column %s: %w", f, err)
		}
	}
	return nil
}

var (
	_ orders.WebhookStore  = (*Store)(nil)
	_ orders.WebhookSwitch = (*Store)(nil)
)

// CreateWebhook stores the endpoint with its cursor at the feed's end, read in
// the same transaction: it gets the events that reach the feed after.
func (s *Store) CreateWebhook(ctx context.Context, w orders.Webhook) (orders.Webhook, error) {
	row := webhookRow{ID: w.ID, URL: w.URL, Secret: w.Secret, CreatedAt: stamp(w.CreatedAt)}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		end, err := readCursor(tx, FeedEnd)
		if err != nil {
			return err
		}
		row.Position = end
		return tx.Create(&row).Error
	})
	if err != nil {
		return orders.Webhook{}, unavailable("create webhook", err)
	}
	return row.webhook(), nil
}

// Webhooks lists up to limit endpoints after the id after, by id.
func (s *Store) Webhooks(ctx context.Context, after string, limit int) ([]orders.Webhook, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []webhookRow
	if err := db.Where("id > ?", after).Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, unavailable("list webhooks", err)
	}
	out := make([]orders.Webhook, len(rows))
	for i, r := range rows {
		out[i] = r.webhook()
	}
	return out, nil
}

// Webhook reads one endpoint.
func (s *Store) Webhook(ctx context.Context, id string) (orders.Webhook, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var row webhookRow
	if err := db.Where("id = ?", id).Take(&row).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return orders.Webhook{}, orders.ErrNotFound
		}
		return orders.Webhook{}, unavailable("webhook", err)
	}
	return row.webhook(), nil
}

// DeleteWebhook deletes an endpoint and its failures.
func (s *Store) DeleteWebhook(ctx context.Context, id string) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Where("id = ?", id).Delete(&webhookRow{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return orders.ErrNotFound
		}
		return tx.Where("webhook_id = ?", id).Delete(&webhookFailureRow{}).Error
	})
	return unavailable("delete webhook", err)
}

// AdvanceWebhook moves the cursor forward and records the failures with the
// move, under the relay's lease. The guarded update (position < through)
// changes a row or not, whatever the database counts as affected: nothing is
// recorded twice.
func (s *Store) AdvanceWebhook(ctx context.Context, id string, through int64, failed []orders.WebhookFailure, leader orders.Leader) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		res := tx.Model(&webhookRow{}).Where("id = ? AND position < ?", id, through).Update("position", through)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var n int64
			if err := tx.Model(&webhookRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
				return err
			}
			if n == 0 {
				return orders.ErrNotFound
			}
			return nil // already there
		}
		rows := make([]webhookFailureRow, 0, len(failed))
		for _, f := range failed {
			msg := f.LastError
			if len(msg) > maxLastError {
				msg = msg[:maxLastError]
			}
			rows = append(rows, webhookFailureRow{WebhookID: id, Position: f.Position, Attempts: f.Attempts, LastError: msg,
				FirstAttemptAt: stamp(f.FirstAttemptAt), FailedAt: stamp(f.FailedAt)})
		}
		if len(rows) == 0 {
			return nil
		}
		return tx.Create(&rows).Error
	})
	return unavailable("advance webhook", err)
}

// WebhookFailures lists up to limit failures of an endpoint after the
// position after: one range read of the primary key.
func (s *Store) WebhookFailures(ctx context.Context, id string, after int64, limit int) ([]orders.WebhookFailure, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var rows []webhookFailureRow
	if err := db.Where("webhook_id = ? AND position > ?", id, after).Order("position").Limit(limit).Find(&rows).Error; err != nil {
		return nil, unavailable("webhook failures", err)
	}
	out := make([]orders.WebhookFailure, len(rows))
	for i, r := range rows {
		out[i] = r.failure()
	}
	return out, nil
}

// WebhooksThrough is the lowest cursor of the endpoints served: a disabled
// one gets nothing, so it holds nothing back (enabled again, it records the
// events purged meanwhile as one failure, as an endpoint behind does).
func (s *Store) WebhooksThrough(ctx context.Context) (int64, bool, error) {
	db, cancel := s.conn(ctx)
	defer cancel()
	var low *int64
	if err := db.Model(&webhookRow{}).Where("disabled_at IS NULL").Select("MIN(position)").Scan(&low).Error; err != nil {
		return 0, false, unavailable("webhooks' cursors", err)
	}
	if low == nil {
		return 0, false, nil
	}
	return *low, true, nil
}

// DisableWebhook disables an endpoint under the relay's lease; the guarded
// update (disabled_at IS NULL) leaves one already disabled as it was.
func (s *Store) DisableWebhook(ctx context.Context, id string, at time.Time, reason string, leader orders.Leader) error {
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		res := tx.Model(&webhookRow{}).Where("id = ? AND disabled_at IS NULL", id).
			Updates(map[string]any{"disabled_at": stamp(at), "disabled_reason": reason})
		if res.Error != nil || res.RowsAffected > 0 {
			return res.Error
		}
		return webhookExists(tx, id)
	})
	return unavailable("disable webhook", err)
}

// WebhookFailing records since when an endpoint has failed, under the
// relay's lease.
func (s *Store) WebhookFailing(ctx context.Context, id string, since *time.Time, leader orders.Leader) error {
	var v any // a typed nil would not be written as NULL by every driver
	if since != nil {
		v = stamp(*since)
	}
	err := s.tx(ctx, func(tx *gorm.DB) error {
		if err := s.lead(tx, leader); err != nil {
			return err
		}
		res := tx.Model(&webhookRow{}).Where("id = ?", id).Update("failing_since", v)
		if res.Error != nil || res.RowsAffected > 0 {
			return res.Error
		}
		return webhookExists(tx, id)
	})
	return unavailable("webhook failing", err)
}

// SwitchWebhook disables an endpoint (kept as it is when it already was) or
// enables it again, its failing time cleared; then reads it back, in the
// same transaction.
func (s *Store) SwitchWebhook(ctx context.Context, id string, disabled bool, at time.Time) (orders.Webhook, error) {
	var row webhookRow
	err := s.tx(ctx, func(tx *gorm.DB) error {
		q := tx.Model(&webhookRow{}).Where("id = ?", id)
		var res *gorm.DB
		if disabled {
			res = q.Where("disabled_at IS NULL").Updates(map[string]any{"disabled_at": stamp(at), "disabled_reason": orders.WebhookManual})
		} else {
			res = q.Updates(map[string]any{"disabled_at": nil, "disabled_reason": "", "failing_since": nil})
		}
		if res.Error != nil {
			return res.Error
		}
		if err := tx.Where("id = ?", id).Take(&row).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return orders.ErrNotFound
			}
			return err
		}
		return nil
	})
	if err != nil {
		return orders.Webhook{}, unavailable("switch webhook", err)
	}
	return row.webhook(), nil
}

// webhookExists is nil when the endpoint exists, ErrNotFound when not: what
// an update that changed no row means.
func webhookExists(tx *gorm.DB, id string) error {
	var n int64
	if err := tx.Model(&webhookRow{}).Where("id = ?", id).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 {
		return orders.ErrNotFound
	}
	return nil
}

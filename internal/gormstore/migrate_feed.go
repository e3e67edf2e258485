package gormstore

import (
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// migrateV10 makes each event's id its place in the feed, so that no event is
// written again after its insert (the relay used to give it a position, an
// update per event; feed.go says how the feed ends instead). The events the
// relay had not placed yet are placed first, as it did, in id order after the
// last position; then every event's id becomes its position, so that every
// cursor held (a webhook's, the stream's, a feed reader's evt_ id) keeps its
// meaning; and the position column goes. New ids come from the same
// sequence, past every position: each placed event had an id of its own, so
// the sequence is past as many ids as there were positions.
func migrateV10(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return placeRemaining(tx) },
		// Through the negatives: no id is ever two rows' on the way.
		func() error { return tx.Exec("UPDATE stock_events SET id = -position").Error },
		func() error { return tx.Exec("UPDATE stock_events SET id = -id").Error },
		func() error {
			if !m.HasIndex(&eventRowV4{}, "idx_stock_events_position") {
				return nil
			}
			return m.DropIndex(&eventRowV4{}, "idx_stock_events_position")
		},
		func() error { return m.DropColumn(&eventRowV4{}, "Position") },
		// Positions had no gap, so every one below the first left was purged:
		// an endpoint behind it learns so from the purge's cursor, as from
		// the purges after (PurgeEvents), now that ids may have gaps.
		func() error {
			return tx.Exec("INSERT INTO event_cursors (name, through) SELECT ?, MIN(id) - 1 FROM stock_events HAVING MIN(id) > 1",
				orders.CursorPurged).Error
		},
		func() error {
			if tx.Name() != "postgres" {
				return nil
			}
			// Only ever forward, and not at all on an empty table: setval marks
			// the value used, and a fresh sequence would skip its 1.
			return tx.Exec(`SELECT setval(pg_get_serial_sequence('stock_events', 'id'), MAX(id)) FROM stock_events
  HAVING MAX(id) > (SELECT last_value FROM stock_events_id_seq)`).Error
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// placeRemaining gives the events without a position the next positions, in
// id order, in rounds of 500: the relay's placing, for the last time.
func placeRemaining(tx *gorm.DB) error {
	for {
		var ids []int64
		if err := tx.Model(&eventRowV4{}).Where("position IS NULL").Order("id").Limit(500).Pluck("id", &ids).Error; err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		var last *int64
		if err := tx.Model(&eventRowV4{}).Select("MAX(position)").Scan(&last).Error; err != nil {
			return err
		}
		base := int64(0)
		if last != nil {
			base = *last
		}
		var q strings.Builder
		args := make([]any, 0, 2*len(ids)+1)
		q.WriteString("UPDATE stock_events SET position = CASE id")
		then := " WHEN ? THEN " + bigint(tx)
		for i, id := range ids {
			q.WriteString(then)
			args = append(args, id, base+int64(i)+1)
		}
		q.WriteString(" END WHERE id IN ?")
		args = append(args, ids)
		if err := tx.Exec(q.String(), args...).Error; err != nil {
			return err
		}
	}
}

// bigint is a bound parameter typed as the position's column, which
// PostgreSQL needs in a CASE.
func bigint(tx *gorm.DB) string {
	switch tx.Name() {
	case "postgres":
		return "CAST(? AS BIGINT)"
	case "mysql":
		return "CAST(? AS SIGNED)"
	}
	return "?"
}

// eventRowV4 is the events' table as migrations 4 to 9 left it, with the
// position the relay gave each event after its commit: frozen here, so that
// migration 4 makes the same table whatever eventRow becomes.
type eventRowV4 struct {
	ID         int64     `gorm:"column:id;primaryKey;autoIncrement"`
	SKU        string    `gorm:"column:sku;size:64;not null"`
	Seq        int64     `gorm:"column:seq;not null"`
	Type       string    `gorm:"column:type;size:32;not null"`
	Quantity   int64     `gorm:"column:quantity;not null"`
	DAvailable int64     `gorm:"column:d_available;not null"`
	DReserved  int64     `gorm:"column:d_reserved;not null"`
	DSold      int64     `gorm:"column:d_sold;not null"`
	DStocked   int64     `gorm:"column:d_stocked;not null"`
	Available  int64     `gorm:"column:available;not null"`
	Reserved   int64     `gorm:"column:reserved;not null"`
	Sold       int64     `gorm:"column:sold;not null"`
	Stocked    int64     `gorm:"column:stocked;not null"`
	OrderID    *string   `gorm:"column:order_id;size:40"`
	HoldID     *string   `gorm:"column:reservation_id;size:40"`
	CreatedAt  time.Time `gorm:"column:created_at;not null"`
	Position   *int64    `gorm:"column:position;uniqueIndex:idx_stock_events_position"`
}

func (eventRowV4) TableName() string { return "stock_events" }

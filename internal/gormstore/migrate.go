package gormstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// migration is one versioned schema change. Applied versions are recorded in
// schema_migrations; each runs once, in order.
type migration struct {
	version int
	name    string
	up      func(tx *gorm.DB) error
}

var migrations = []migration{
	{1, "skus, orders, order lines, stock ledger, idempotency records", func(tx *gorm.DB) error {
		if tx.Name() == "mysql" {
			// SKUs and keys compare byte for byte, as on the other databases: MySQL's
			// default collation would make A-1 and a-1 one SKU.
			tx = tx.Set("gorm:table_options", "CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
		}
		return tx.Migrator().CreateTable(&skuRow{}, &orderRow{}, &lineRow{}, &ledgerRow{}, &idempotencyRow{})
	}},
}

// Migrate applies the migrations not applied yet and returns how many it applied.
// Replicas starting at once serialize on a database lock (an advisory lock on
// PostgreSQL, GET_LOCK on MySQL, the write lock on SQLite).
func Migrate(ctx context.Context, db *gorm.DB) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	applied := 0
	err := db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		if conn.Name() == "sqlite" {
			// An immediate transaction holds the write lock from BEGIN: the other
			// processes wait for it, and DDL is transactional there.
			return conn.Transaction(func(tx *gorm.DB) error {
				n, err := applyMigrations(tx)
				applied = n
				return err
			})
		}
		conn = conn.Session(&gorm.Session{})
		unlock, err := migrationLock(conn)
		if err != nil {
			return err
		}
		defer unlock()
		applied, err = applyMigrations(conn)
		return err
	})
	return applied, err
}

func applyMigrations(conn *gorm.DB) (int, error) {
	conn = conn.Session(&gorm.Session{}) // each statement below starts afresh
	applied := 0
	err := func() error {
		if err := conn.Migrator().AutoMigrate(&migrationRow{}); err != nil {
			return fmt.Errorf("schema_migrations: %w", err)
		}
		var done []int
		if err := conn.Model(&migrationRow{}).Pluck("version", &done).Error; err != nil {
			return fmt.Errorf("read schema_migrations: %w", err)
		}
		have := make(map[int]bool, len(done))
		for _, v := range done {
			have[v] = true
		}
		for _, m := range migrations {
			if have[m.version] {
				continue
			}
			if err := m.up(conn); err != nil {
				return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
			}
			row := migrationRow{Version: m.version, Name: m.name, AppliedAt: time.Now().UTC()}
			if err := conn.Create(&row).Error; err != nil {
				return fmt.Errorf("record migration %d: %w", m.version, err)
			}
			applied++
		}
		return nil
	}()
	return applied, err
}

func migrationLock(conn *gorm.DB) (func(), error) {
	const key = 0x73746f636b // "stock"
	switch conn.Name() {
	case "postgres":
		if err := conn.Exec("SELECT pg_advisory_lock(?)", key).Error; err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		return func() { conn.Exec("SELECT pg_advisory_unlock(?)", key) }, nil
	case "mysql":
		var got *int
		if err := conn.Raw("SELECT GET_LOCK('stockguard_migrate', 60)").Scan(&got).Error; err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		if got == nil || *got != 1 {
			return nil, errors.New("migration lock: timed out")
		}
		return func() { conn.Exec("SELECT RELEASE_LOCK('stockguard_migrate')") }, nil
	default:
		return func() {}, nil
	}
}

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
		return binTables(tx).Migrator().CreateTable(&skuRowV1{}, &orderRowV1{}, &lineRow{}, &ledgerRowV1{}, &idempotencyRowV1{})
	}},
	{2, "counters on skus; idempotency records without claims, kept for a retention", migrateV2},
	{3, "holds: reservations and their lines, reserved on skus, leader fences", migrateV3},
	{4, "stock events: the outbox, and each SKU's event number", migrateV4},
	{5, "webhook endpoints and their failed deliveries", migrateV5},
	{6, "stock events without the unique index on (sku, seq)", migrateV6},
	{7, "clients and their API keys; orders and holds owned by a client, for a customer", migrateV7},
	{8, "webhook endpoints: disabled", migrateV8},
	{9, "caps: units held per client and SKU, per customer and SKU; max_per_customer on skus", migrateV9},
	{10, "stock events: the id is the feed's position, given at the insert; no position column", migrateV10},
	{11, "locations: stock per location, allocations, low-stock thresholds", migrateV11},
}

// latest is the highest version of the migrations.
func latest() int {
	v := 0
	for _, m := range migrations {
		v = max(v, m.version)
	}
	return v
}

// binTables makes MySQL compare SKUs and keys byte for byte, as the other
// databases do: its default collation would make A-1 and a-1 one SKU.
func binTables(tx *gorm.DB) *gorm.DB {
	if tx.Name() == "mysql" {
		return tx.Set("gorm:table_options", "CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
	}
	return tx
}

// migrateV2 puts stocked and sold on each SKU's row, counted from the history
// once here and kept by every write after, so that a SKU's stock is one row
// read; drops the idempotency claims (a record is now written in its order's
// transaction, never before, so a running claim cannot be left behind) and the
// unique key on orders (a key may be used again once its record is forgotten),
// and indexes the records by age for the purge.
func migrateV2(tx *gorm.DB) error {
	m := tx.Migrator()
	steps := []func() error{
		func() error { return m.AddColumn(&skuRow{}, "Stocked") },
		func() error { return m.AddColumn(&skuRow{}, "Sold") },
		func() error {
			return tx.Exec(`UPDATE skus SET
  stocked = COALESCE((SELECT SUM(l.delta) FROM stock_ledger l WHERE l.sku = skus.sku AND l.kind = 'restock'), 0),
  sold = COALESCE((SELECT SUM(ol.quantity) FROM order_lines ol JOIN orders o ON o.id = ol.order_id
                   WHERE ol.sku = skus.sku AND o.status = 'placed'), 0)`).Error
		},
		func() error { return tx.Exec("DELETE FROM idempotency_records WHERE state <> 'done'").Error },
		func() error { return m.DropColumn(&idempotencyRowV1{}, "state") },
		func() error { return m.DropColumn(&idempotencyRowV1{}, "claim") },
		func() error { return m.CreateIndex(&idempotencyRow{}, "idx_idempotency_records_created_at") },
		func() error { return m.DropIndex(&orderRowV1{}, "idx_orders_idempotency_key") },
		func() error { return m.DropColumn(&orderRowV1{}, "idempotency_key") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// migrateV3 adds holds: the reservations and their lines, a reserved counter on
// each SKU (0: no hold existed before), the hold an order confirmed, a ledger
// entry's hold and a record's hold, and the sweeper's leader fence.
func migrateV3(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return m.CreateTable(&holdRowV3{}, &holdLineRow{}, &leaderRow{}) },
		func() error { return m.AddColumn(&skuRow{}, "Reserved") },
		func() error { return m.AddColumn(&orderRow{}, "HoldID") },
		func() error { return m.AddColumn(&ledgerRow{}, "HoldID") },
		func() error { return m.AddColumn(&idempotencyRow{}, "HoldID") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// migrateV4 adds the outbox of stock events, and on each SKU the number of its
// last event (0: a SKU's events start with the first change after this).
func migrateV4(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return m.CreateTable(&eventRowV4{}, &cursorRow{}) },
		func() error { return m.AddColumn(&skuRow{}, "EventSeq") },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// migrateV6 drops the unique index on the events' (sku, seq), which
// migration 4 made. Nothing reads by it, and each event paid for it twice:
// an index entry at its insert and another when the relay placed it. What it
// guarded, one event per number, is the SKU row's lock's: the guarded update
// bumps event_seq while it holds it, to the commit. The rebuild tests check the
// numbers, with no gap and no repeat, from the stream.
func migrateV6(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	if !m.HasIndex(&eventRowV4{}, "idx_stock_events_sku_seq") {
		return nil
	}
	return m.DropIndex(&eventRowV4{}, "idx_stock_events_sku_seq")
}

// The tables as migration 1 made them: frozen here, so that migration 1 makes
// the same tables whatever the models in models.go become.

type skuRowV1 struct {
	SKU       string `gorm:"column:sku;primaryKey;size:64"`
	Available int64  `gorm:"column:available;not null;check:chk_skus_available,available >= 0"`
	Fence     int64  `gorm:"column:fence;not null;default:0"`
	UpdatedAt time.Time
}

func (skuRowV1) TableName() string { return "skus" }

type orderRowV1 struct {
	ID             string     `gorm:"column:id;primaryKey;size:40"`
	Status         string     `gorm:"column:status;size:16;not null"`
	IdempotencyKey *string    `gorm:"column:idempotency_key;size:255;uniqueIndex:idx_orders_idempotency_key"`
	CreatedAt      time.Time  `gorm:"column:created_at;not null"`
	CancelledAt    *time.Time `gorm:"column:cancelled_at"`
}

func (orderRowV1) TableName() string { return "orders" }

type ledgerRowV1 struct {
	ID        int64     `gorm:"column:id;primaryKey;autoIncrement"`
	SKU       string    `gorm:"column:sku;size:64;not null;index:idx_stock_ledger_sku"`
	Delta     int64     `gorm:"column:delta;not null"`
	Kind      string    `gorm:"column:kind;size:16;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	Fence     int64     `gorm:"column:fence;not null"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
}

func (ledgerRowV1) TableName() string { return "stock_ledger" }

type idempotencyRowV1 struct {
	Key       string    `gorm:"column:idem_key;primaryKey;size:255"`
	Hash      string    `gorm:"column:request_hash;size:64;not null"`
	State     string    `gorm:"column:state;size:16;not null"`
	Claim     string    `gorm:"column:claim;size:40;not null"`
	OrderID   *string   `gorm:"column:order_id;size:40"`
	ShortSKUs string    `gorm:"column:short_skus;size:4000;not null;default:''"`
	CreatedAt time.Time `gorm:"column:created_at;not null"`
	UpdatedAt time.Time `gorm:"column:updated_at;not null"`
}

func (idempotencyRowV1) TableName() string { return "idempotency_records" }

// Migrate applies the migrations not applied yet and returns how many it applied.
// Replicas starting at once serialize on a database lock (an advisory lock on
// PostgreSQL, GET_LOCK on MySQL, the write lock on SQLite).
func Migrate(ctx context.Context, db *gorm.DB) (int, error) {
	return migrateTo(ctx, db, latest())
}

// migrateTo applies the migrations up to version (tests start from older ones).
func migrateTo(ctx context.Context, db *gorm.DB, version int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	applied := 0
	err := db.WithContext(ctx).Connection(func(conn *gorm.DB) error {
		if conn.Name() == "sqlite" {
			// An immediate transaction holds the write lock from BEGIN: the other
			// processes wait for it, and DDL is transactional there.
			return conn.Transaction(func(tx *gorm.DB) error {
				n, err := applyMigrations(tx, version)
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
		applied, err = applyMigrations(conn, version)
		return err
	})
	return applied, err
}

func applyMigrations(conn *gorm.DB, version int) (int, error) {
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
			if have[m.version] || m.version > version {
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

// migrateV9 adds the counters of I9 and the SKUs' limit per customer (none
// for every SKU), and counts the counters from the live holds and orders:
// the units each client holds of each SKU (the admin token's holds, client
// "", have no cap and no counter), and the units each client's customer has
// of each SKU in live holds and orders not cancelled. Counted under no cap
// (max_held, max_units NULL): the next hold or order that adds to a counter
// writes the cap it was decided under.
func migrateV9(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return m.CreateTable(&clientHoldRow{}, &customerUnitsRow{}) },
		func() error { return m.AddColumn(&skuRow{}, "MaxPerCustomer") },
		func() error {
			return tx.Exec("INSERT INTO client_sku_holds (client_id, sku, held) " + heldRecount).Error
		},
		func() error {
			return tx.Exec("INSERT INTO customer_sku_units (sku, client_id, customer, units) " + unitsRecount).Error
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// holdRowV3 is the reservations table as migration 3 made it.
type holdRowV3 struct {
	ID        string     `gorm:"column:id;primaryKey;size:40"`
	Status    string     `gorm:"column:status;size:16;not null;index:idx_reservations_status_expires_at,priority:1"`
	CreatedAt time.Time  `gorm:"column:created_at;not null"`
	ExpiresAt time.Time  `gorm:"column:expires_at;not null;index:idx_reservations_status_expires_at,priority:2"`
	EndedAt   *time.Time `gorm:"column:ended_at"`
	OrderID   *string    `gorm:"column:order_id;size:40"`
}

func (holdRowV3) TableName() string { return "reservations" }

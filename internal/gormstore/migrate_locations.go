package gormstore

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// migrateV11 adds stock per location (issue 41): the locations, with the
// default one every deployment has; each SKU's counts per location, for the
// SKUs stocked in a location other than the default (a SKU without rows
// there, every SKU before this migration, has all its stock in the default
// location: its own row is that location's counts, so no unit moves and the
// order path of a deployment that never names a location writes what it
// wrote before); which location each order's and hold's units came from;
// the number of a SKU's location rows (0: none, so a write reads none); its
// low-stock threshold; and the location of a location's events.
func migrateV11(tx *gorm.DB) error {
	m := binTables(tx).Migrator()
	steps := []func() error{
		func() error { return m.CreateTable(&locationRow{}, &skuLocationRow{}, &allocationRow{}) },
		func() error {
			return tx.Exec("INSERT INTO locations (id, name, priority, active, created_at) VALUES (?, ?, 0, ?, ?)",
				defaultLocation, "Default", true, time.Now().UTC()).Error
		},
		func() error { return m.AddColumn(&skuRow{}, "Locations") },
		func() error { return m.AddColumn(&skuRow{}, "LowStockThreshold") },
		func() error { return m.AddColumn(&eventRow{}, "Location") },
		func() error { return m.AddColumn(&skuRow{}, "BackorderLimit") },
		func() error { return backorderCheck(tx) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// backorderCheck lets a SKU's available go below 0 by up to its backorder
// limit: chk_skus_available becomes available + backorder_limit >= 0.
// SQLite cannot alter a constraint: GORM rebuilds the table.
func backorderCheck(tx *gorm.DB) error {
	if tx.Name() == "sqlite" {
		m := tx.Migrator()
		if err := m.DropConstraint(&skuRowV1{}, "chk_skus_available"); err != nil {
			return err
		}
		return m.CreateConstraint(&skuRow{}, "chk_skus_available")
	}
	for _, q := range []string{
		"ALTER TABLE skus DROP CONSTRAINT chk_skus_available",
		"ALTER TABLE skus ADD CONSTRAINT chk_skus_available CHECK (available + backorder_limit >= 0)",
	} {
		if err := tx.Exec(q).Error; err != nil {
			return err
		}
	}
	return nil
}

// defaultLocation is the location of every unit not placed in another.
const defaultLocation = "default"

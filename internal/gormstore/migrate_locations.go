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
	}
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

// defaultLocation is the location of every unit not placed in another.
const defaultLocation = "default"

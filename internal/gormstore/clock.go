package gormstore

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

// The store's time. A decision on time that replicas must agree on (a hold's
// expiry, above all) is taken on the database's clock, read in the transaction
// that acts on it: replicas' clocks may differ, the database's is one.

// clock reads the database's time (SQLite's is this machine's), or the store's
// own clock when WithClock set one.
func (s *Store) clock(tx *gorm.DB) (time.Time, error) {
	q := s.clockSQL(tx)
	if q == "" {
		return s.now(), nil
	}
	var t time.Time
	if err := tx.Raw("SELECT " + q).Row().Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return t.UTC(), nil
}

// clockSQL is the SQL expression of the database's time, or "" when the
// store's own clock is the time (SQLite's is this machine's, or WithClock set
// one).
func (s *Store) clockSQL(db *gorm.DB) string {
	if s.fixedClock {
		return ""
	}
	switch db.Name() {
	case "postgres":
		return "clock_timestamp()"
	case "mysql":
		return "UTC_TIMESTAMP(6)"
	}
	return ""
}

// WithClock returns a store that decides expiry on now rather than the
// database's clock: for tests that move time. A deployment keeps the database's.
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = func() time.Time { return now().UTC() }
	c.fixedClock = true
	return &c
}

// stamp is a time as the tables keep it: UTC, to the millisecond (MySQL's
// DATETIME(3)), so that what is answered is what is read back.
func stamp(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

//go:build cgo

package gormstore

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens SQLite through GORM's own driver (SQLite's C library,
// with cgo). WAL lets readers run beside the writer; an immediate transaction
// takes the write lock at BEGIN, so two processes never deadlock upgrading a read
// lock; the busy timeout makes the other processes wait instead of failing.
func sqliteDialector(path string) gorm.Dialector {
	return sqlite.Open(path + "?_journal_mode=WAL&_busy_timeout=10000&_txlock=immediate&_foreign_keys=on")
}

//go:build !cgo

package gormstore

import (
	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens SQLite in pure Go when there is no C compiler (a fresh
// machine with only Go): the same settings as with cgo, slower under contention.
func sqliteDialector(path string) gorm.Dialector {
	return sqlite.Open(path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_txlock=immediate")
}

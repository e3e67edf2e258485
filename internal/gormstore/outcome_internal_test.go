package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Which errors of a COMMIT leave its outcome unknown, per dialect.
func TestLostCommit(t *testing.T) {
	cases := []struct {
		dialect string
		err     error
		lost    bool
	}{
		{"postgres", io.ErrUnexpectedEOF, true},
		{"postgres", fmt.Errorf("wrapped: %w", errors.New("conn closed")), true},
		{"postgres", &pgconn.PgError{Severity: "ERROR", Code: "40001"}, false},  // refused: rolled back
		{"postgres", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},   // the session ended
		{"postgres", fmt.Errorf("commit: %w", pgx.ErrTxCommitRollback), false},  // answered ROLLBACK
		{"postgres", sql.ErrTxDone, false},                                      // ended before
		{"postgres", context.DeadlineExceeded, false},                           // database/sql never sent it
		{"postgres", fmt.Errorf("timeout: %w", context.DeadlineExceeded), true}, // a driver's, mid-COMMIT
		{"postgres", closedAfterSend{}, true},                                   // pgx's "conn closed", safe to retry or not
		{"mysql", &mysql.MySQLError{Number: 1213}, false},                       // refused
		{"mysql", mysql.ErrInvalidConn, true},                                   // lost
		{"mysql", driver.ErrBadConn, false},                                     // not sent
		{"sqlite", errors.New("database is locked"), false},                     // in the process
	}
	for _, c := range cases {
		if got := lostCommit(c.dialect, c.err); got != c.lost {
			t.Errorf("lostCommit(%s, %v) = %v, want %v", c.dialect, c.err, got, c.lost)
		}
	}
}

// closedAfterSend is pgx's lock error for a closed connection, which says it
// is safe to retry even when the COMMIT was sent before the connection closed.
type closedAfterSend struct{}

func (closedAfterSend) Error() string     { return "conn closed" }
func (closedAfterSend) SafeToRetry() bool { return true }
func (closedAfterSend) Unwrap() error     { return pgconn.ErrConnClosed }

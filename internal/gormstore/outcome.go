package gormstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// tx runs fn in a transaction bounded by the store's timeout. Begin and Commit
// are run here, not by gorm's Transaction, to know which step failed: a failure
// before the COMMIT was sent, or a COMMIT the server refused, committed
// nothing; a COMMIT whose answer was lost may have committed, and is
// orders.ErrOutcomeUnknown (see lostCommit).
func (s *Store) tx(ctx context.Context, fn func(tx *gorm.DB) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	tx := s.db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	done := false
	defer func() {
		if !done { // fn failed or panicked: roll back (a panic goes on up)
			tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil { // nothing sent yet: the deferred rollback ends it
		return err
	}
	done = true
	if err := tx.Commit().Error; err != nil {
		if lostCommit(s.db.Name(), err) {
			return fmt.Errorf("%w: %w", orders.ErrOutcomeUnknown, err)
		}
		return err
	}
	return nil
}

// lostCommit says whether err, returned by a COMMIT on dialect (gorm's name
// of it), leaves its outcome
// unknown: the COMMIT may have reached the server, and its answer did not
// come back. Known (false) are: an error of the server itself (PostgreSQL's
// ERROR, MySQL's error packet: the transaction was rolled back), a COMMIT the
// server answered ROLLBACK, a transaction database/sql had already ended or
// did not send the COMMIT of (its context was done first), a COMMIT the
// driver says it never sent, and any SQLite error (the engine is in the
// process: no answer can be lost). Everything else is unknown, including a
// PostgreSQL FATAL in reply to a COMMIT: the session ended, and the commit
// record may have been written first (a failover's shutdown does that).
func lostCommit(dialect string, err error) bool {
	if dialect == "sqlite" {
		return false
	}
	if errors.Is(err, sql.ErrTxDone) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, driver.ErrBadConn) {
		return false
	}
	// database/sql returns its context's error, unwrapped, when the context
	// ended before it sent the COMMIT; the drivers wrap the ones they meet.
	if err == context.Canceled || err == context.DeadlineExceeded { //nolint:errorlint // identity is the point
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC"
	}
	// pgx: nothing was written to the connection. Except "conn closed", which
	// pgx says is safe to retry also when the connection closed while it awaited
	// the COMMIT's answer (the status is read again after the failed read): seen
	// on every COMMIT whose answer a test proxy dropped, and in a failover.
	if pgconn.SafeToRetry(err) && !errors.Is(err, pgconn.ErrConnClosed) {
		return false
	}
	var myErr *mysql.MySQLError
	return !errors.As(err, &myErr)
}

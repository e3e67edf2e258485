// Package gormstore is stockguard's database, through GORM: PostgreSQL first,
// MySQL/MariaDB and SQLite too. It implements orders.Store: guarded, fenced
// decrements, orders, holds (holds.go: decided on the database's clock, each
// hold's row locked by whatever ends it), the stock ledger, idempotency records
// and the sweeper's leader fence, with versioned migrations.
package gormstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// ErrUnsupportedURL is returned for a DATABASE_URL of an unknown kind.
var ErrUnsupportedURL = errors.New("unsupported database url")

// DefaultMaxConns is the default size of the connection pool (PostgreSQL and
// MySQL): a replica gets nothing from more transactions at once than the
// database has cores to run them, and three replicas of 16 stay well under
// PostgreSQL's default of 100 connections.
const DefaultMaxConns = 16

// Open connects to a DATABASE_URL: postgres://..., mysql://user:pass@host:3306/db
// or sqlite:<path>. It does not migrate. PostgreSQL connections take an index
// whenever there is one (indexOnly) and have no statement_timeout
// (noStatementTimeout).
//
// A PostgreSQL URL may name several hosts (host1:port,host2:port,...) with
// target_session_attrs=read-write: each new connection then goes to whichever
// host is the primary now, so after a failover the pool follows the new
// primary by itself. Connections to the old one are dropped, not reused: one
// that broke (the server died or restarted as a standby) is closed by the
// driver and discarded when next taken from the pool, and one whose server
// reports itself read-only is discarded too (dropReadOnly). Each host gets
// connect_timeout (multiHostTimeout) before the next is tried.
func Open(databaseURL string) (*gorm.DB, error) {
	dialector, err := dialectorFor(databaseURL)
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(dialector, &gorm.Config{
		Logger:                 logger.Discard,
		TranslateError:         true, // duplicate keys as gorm.ErrDuplicatedKey on every dialect
		SkipDefaultTransaction: true, // our writes choose their transactions
		NowFunc:                func() time.Time { return time.Now().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	if db.Name() == "sqlite" {
		// One writer at a time is SQLite's rule; a single connection per process
		// avoids busy errors between this process's own transactions.
		sqlDB.SetMaxOpenConns(1)
	} else {
		sqlDB.SetMaxOpenConns(DefaultMaxConns)
		sqlDB.SetMaxIdleConns(DefaultMaxConns)
		sqlDB.SetConnMaxLifetime(30 * time.Minute)
	}
	return db, nil
}

// BoundIdleTransactions returns databaseURL with PostgreSQL's
// idle_in_transaction_session_timeout set to d (rounded up to a millisecond),
// unless the URL sets it already (to 0, say, which turns it off). Other
// databases' URLs come back as they are.
//
// A process stopped inside a transaction (a pause, a stalled VM) keeps the rows
// it wrote locked for as long as it is stopped, and its lease running out does
// not free them: the next holder of the SKU's lock would wait on the row all
// that time. With the timeout, PostgreSQL ends a session idle in a transaction
// for d and rolls the transaction back. Give it the lock's lease: a holder that
// is alive never idles inside its transaction for a whole lease, and one that
// was stopped that long has lost its lease anyway.
func BoundIdleTransactions(databaseURL string, d time.Duration) string {
	if !isPostgres(databaseURL) {
		return databaseURL
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL // Open reports it
	}
	q := u.Query()
	if q.Has("idle_in_transaction_session_timeout") {
		return databaseURL
	}
	msec := max(1, (d+time.Millisecond-1)/time.Millisecond)
	q.Set("idle_in_transaction_session_timeout", strconv.FormatInt(int64(msec), 10)) // sent at connect, as a setting
	u.RawQuery = q.Encode()
	return u.String()
}

// indexOnly returns a PostgreSQL URL with enable_seqscan=off, unless the URL
// sets enable_seqscan already (to on, say, which is PostgreSQL's default).
//
// Every query of the order path reads or writes rows by an index, and a
// sequential scan there is always a planner's mistake, but one it makes on the
// tables of a new deployment: the driver prepares every statement once per
// connection, and after five executions PostgreSQL may switch it to a generic
// plan, made while the tables are tiny (where a scan is cheapest) and kept until
// an ANALYZE invalidates it, which autovacuum does only when it next visits.
// Meanwhile the batch's read of its idempotency keys scanned the whole table
// every time (measured on a fresh database: 352 scans reading 3.85 million rows
// in two runs of 8 s, at 2,164 and 1,147 orders/s; 5,443 and 5,108 after an
// ANALYZE). With sequential scans off, the planner takes the index whenever
// there is one, whatever the statistics, and the plans stay cached.
//
// plan_cache_mode=force_custom_plan fixes the same mistake by planning every
// execution, and was measured in make bench to cost 15-30% of lock-batch's
// orders/s on 100 SKUs (the planning is on PostgreSQL's CPU, on every
// statement); dropping the driver's named statements costs a parse as well.
func indexOnly(databaseURL string) string {
	return withSetting(databaseURL, "enable_seqscan", "off")
}

// noStatementTimeout returns a PostgreSQL URL with statement_timeout=0,
// unless the URL sets statement_timeout itself, so that a default of the
// role's or the database's does not apply.
//
// A COMMIT waits for the synchronous standby, and when that wait is cancelled
// (statement_timeout ends it as a cancel request does) PostgreSQL answers the
// COMMIT with success and a warning that the standby may not have it: an
// order acknowledged then can be missing on the standby promoted next. The
// service's deadlines come from its contexts instead, and pgx meets a
// context's end by closing the connection, never by a cancel request: the
// caller gets an error, the outcome unknown, never a false success.
func noStatementTimeout(databaseURL string) string {
	return withSetting(databaseURL, "statement_timeout", "0")
}

// withSetting returns a PostgreSQL URL with the run-time setting name (sent at
// connect) set to value, unless the URL sets it already.
func withSetting(databaseURL, name, value string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL // the driver reports it
	}
	q := u.Query()
	if q.Has(name) {
		return databaseURL
	}
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// CheckURL reports what is wrong with a database URL of Open's forms, without
// connecting: for a replica to refuse a bad URL before it opens anything.
func CheckURL(databaseURL string) error {
	if isPostgres(databaseURL) {
		if _, err := url.Parse(databaseURL); err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // the URL itself, and any password in it, stays out
			}
			return fmt.Errorf("%w: %w", ErrUnsupportedURL, err)
		}
	}
	_, err := dialectorFor(databaseURL)
	return err
}

func isPostgres(raw string) bool {
	return strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://")
}

// multiHostTimeout is the connect_timeout of a URL of several hosts that sets
// none: without it, a host that does not answer (a machine that hangs or is
// gone, whose SYN goes unanswered) would take the caller's whole deadline and
// leave none for the next host, the primary.
const multiHostTimeout = 2 * time.Second

// postgresDialector is GORM's PostgreSQL driver (on pgx's database/sql
// driver) with dropReadOnly as the check of a pooled connection before reuse,
// and multiHostTimeout.
func postgresDialector(raw string) gorm.Dialector {
	raw = noStatementTimeout(indexOnly(raw))
	if u, err := url.Parse(raw); err == nil && strings.Contains(u.Host, ",") && !u.Query().Has("connect_timeout") {
		q := u.Query()
		q.Set("connect_timeout", strconv.Itoa(int(multiHostTimeout/time.Second)))
		u.RawQuery = q.Encode()
		raw = u.String()
	}
	return postgres.New(postgres.Config{DSN: raw, OptionOpenDB: []stdlib.OptionOpenDB{stdlib.OptionResetSession(dropReadOnly)}})
}

// dropReadOnly discards a pooled connection whose server says (in the settings
// PostgreSQL 14 and later report to the client at no cost) that it cannot
// write: a standby, or a session made read-only. Its writes would all fail
// with SQLSTATE 25006; a new connection goes to the primary instead
// (target_session_attrs=read-write).
func dropReadOnly(_ context.Context, c *pgx.Conn) error {
	pc := c.PgConn()
	if pc.ParameterStatus("in_hot_standby") == "on" || pc.ParameterStatus("default_transaction_read_only") == "on" {
		return driver.ErrBadConn
	}
	return nil
}

func dialectorFor(raw string) (gorm.Dialector, error) {
	switch {
	case isPostgres(raw):
		return postgresDialector(raw), nil
	case strings.HasPrefix(raw, "mysql://"):
		dsn, err := mysqlDSN(raw)
		if err != nil {
			return nil, err
		}
		return mysql.Open(dsn), nil
	case strings.HasPrefix(raw, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
		if path == "" {
			return nil, fmt.Errorf("%w: sqlite: needs a path", ErrUnsupportedURL)
		}
		return sqliteDialector(path), nil
	default:
		return nil, fmt.Errorf("%w: %q (want postgres://, mysql:// or sqlite:<path>)", ErrUnsupportedURL, redact(raw))
	}
}

// mysqlDSN turns mysql://user:pass@host:port/db?params into the driver's DSN.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("mysql url: %w", err)
	}
	q := u.Query()
	q.Set("parseTime", "true")
	q.Set("loc", "UTC")
	q.Set("interpolateParams", "true") // one round trip per statement, not prepare + execute
	if !q.Has("timeout") {
		q.Set("timeout", "5s")
	}
	user := u.User.Username()
	if p, ok := u.User.Password(); ok {
		user += ":" + p
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	return fmt.Sprintf("%s@tcp(%s)/%s?%s", user, host, strings.TrimPrefix(u.Path, "/"), q.Encode()), nil
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

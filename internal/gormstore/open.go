// Package gormstore is stockguard's database, through GORM: PostgreSQL first,
// MySQL/MariaDB and SQLite too. It implements orders.Store: guarded, fenced
// decrements, orders, the stock ledger and idempotency records, with versioned
// migrations.
package gormstore

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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
// or sqlite:<path>. It does not migrate. PostgreSQL connections plan every
// execution of a statement for its arguments (customPlans).
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
	if !strings.HasPrefix(databaseURL, "postgres://") && !strings.HasPrefix(databaseURL, "postgresql://") {
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

// customPlans returns a PostgreSQL URL with plan_cache_mode=force_custom_plan,
// unless the URL sets plan_cache_mode already (to auto, say, which is
// PostgreSQL's default).
//
// The driver prepares every statement once per connection and reuses it. After
// five executions PostgreSQL may switch a prepared statement to a generic plan,
// planned for no particular arguments, and keep it until something invalidates
// it: ANALYZE, or VACUUM updating the table's size. On a fresh database that
// plan is made while the tables are tiny, where a sequential scan is cheapest,
// and autovacuum analyses them only when it next visits the database (every
// minute by default): meanwhile, on tables growing by thousands of rows a
// second, the batch's read of its idempotency keys scanned the whole table every
// time (measured on a fresh database: 352 scans reading 3.85 million rows in two
// runs of 8 s, at 2,164 and 1,147 orders/s; 5,443 and 5,108 after an ANALYZE),
// and Stock scanned all orders once per line of the SKU (plan_test.go). A custom
// plan is made for each execution, for the arguments given and the table as it
// is (its size is read at planning time, analysed or not). The price is planning every
// execution, parsing staying cached: measured 10-25 µs of the server's time for
// a lookup of this store, 40-75 µs for a batch's INSERT of 32 rows. Dropping the
// driver's named statements instead (default_query_exec_mode=exec or
// cache_describe) costs more: a parse as well, every execution.
func customPlans(databaseURL string) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return databaseURL // the driver reports it
	}
	q := u.Query()
	if q.Has("plan_cache_mode") {
		return databaseURL
	}
	q.Set("plan_cache_mode", "force_custom_plan") // sent at connect, as a setting
	u.RawQuery = q.Encode()
	return u.String()
}

func dialectorFor(raw string) (gorm.Dialector, error) {
	switch {
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return postgres.Open(customPlans(raw)), nil
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

package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// MigrateTo applies the migrations up to version, so that a test can build an
// older schema, fill it, and migrate it the rest of the way.
var MigrateTo = migrateTo

// LatestMigration is the version of the last migration.
var LatestMigration = migrations[len(migrations)-1].version

// MigrationsAfter is how many migrations Migrate applies to a database of
// schema version.
func MigrationsAfter(version int) int {
	n := 0
	for _, m := range migrations {
		if m.version > version {
			n++
		}
	}
	return n
}

// WithEventsOutsideTransaction returns a store that writes its events outside
// the writes' transactions (never in the service: see Store.eventsOutside).
func (s *Store) WithEventsOutsideTransaction() *Store {
	c := *s
	c.eventsOutside = true
	return &c
}

// TrustingTheSequence returns a store whose feed ends at the largest event id
// committed, without waiting for the writes that took smaller ids (never in
// the service: see Store.trustSequence). It has marks of its own.
func (s *Store) TrustingTheSequence() *Store {
	c := *s
	c.trustSequence = true
	c.feed = &feedMarks{end: -1}
	return &c
}

// WithSettleAfter returns a store whose marks settle on MySQL d after they
// were taken rather than mysqlSettle: tests that wait for the feed.
func (s *Store) WithSettleAfter(d time.Duration) *Store {
	c := *s
	c.settleAfter = d
	return &c
}

// Settle moves the feed's end until no mark waits, as the relay's rounds do,
// for at most 10 s; it returns the end.
func (s *Store) Settle(ctx context.Context, leader orders.Leader) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		end, err := s.AdvanceFeed(ctx, leader)
		if err != nil || !end.Waiting {
			return end.Through, err
		}
		if time.Now().After(deadline) {
			return end.Through, fmt.Errorf("the feed's end still waits after 10 s, at %d", end.Through)
		}
		time.Sleep(5 * time.Millisecond) // a write still running: it ends on its own
	}
}

// CountStatements makes db count the statements its transactions send (those
// that Store.tx begins, every write's) in n.
func CountStatements(db *gorm.DB, n *atomic.Int64) error {
	b, ok := db.Statement.ConnPool.(gorm.TxBeginner)
	if !ok {
		return fmt.Errorf("the pool %T begins no *sql.Tx", db.Statement.ConnPool)
	}
	db.Statement.ConnPool = countingPool{ConnPool: db.Statement.ConnPool, b: b, n: n}
	return nil
}

// countingPool begins transactions that count their statements.
type countingPool struct {
	gorm.ConnPool
	b gorm.TxBeginner
	n *atomic.Int64
}

func (p countingPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	tx, err := p.b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, n: p.n}, nil
}

// countingTx is a transaction that counts the statements sent on it.
type countingTx struct {
	*sql.Tx
	n *atomic.Int64
}

func (t *countingTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	t.n.Add(1)
	return t.Tx.ExecContext(ctx, q, args...)
}

func (t *countingTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	t.n.Add(1)
	return t.Tx.QueryContext(ctx, q, args...)
}

func (t *countingTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	t.n.Add(1)
	return t.Tx.QueryRowContext(ctx, q, args...)
}

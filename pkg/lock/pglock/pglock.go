package pglock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Defaults of Options.
const (
	DefaultTable   = "stockguard_locks"
	DefaultChannel = "stockguard_lock_released"
)

// Options configure a Backend. The zero value is usable.
type Options struct {
	// Table is the lock table, optionally schema-qualified ("locks.leases"); each
	// part a letter or underscore followed by letters, digits or underscores, at
	// most 63 bytes (it is quoted, so case is kept). Default DefaultTable.
	Table string

	// Channel is the NOTIFY channel of releases, an identifier as Table's parts
	// are. Default DefaultChannel.
	Channel string
}

// Backend is the lock.Backend on a PostgreSQL table; see the package
// documentation. It is also a lock.Notifier (LISTEN/NOTIFY). Safe for
// concurrent use.
type Backend struct {
	pool    *pgxpool.Pool
	table   string // the name as given
	channel string
	sql     statements
}

type statements struct {
	create, obtain, undo, renew, held, release, advance string
}

var (
	_ lock.Backend  = (*Backend)(nil)
	_ lock.Notifier = (*Backend)(nil)
)

// identifier is one unquoted-style SQL identifier; it is quoted anyway.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// New returns the Backend on the table opt.Table of the pool's database. It
// does not create the table: call Migrate (Open does). The pool stays the
// caller's to close.
func New(pool *pgxpool.Pool, opt *Options) (*Backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pglock: nil pool", lock.ErrInvalidOptions)
	}
	var o Options
	if opt != nil {
		o = *opt
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Channel == "" {
		o.Channel = DefaultChannel
	}
	parts := strings.Split(o.Table, ".")
	for _, p := range parts {
		if len(parts) > 2 || !identifier.MatchString(p) {
			return nil, fmt.Errorf("%w: pglock: table %q is not an identifier (or schema.identifier)", lock.ErrInvalidOptions, o.Table)
		}
	}
	if !identifier.MatchString(o.Channel) {
		return nil, fmt.Errorf("%w: pglock: channel %q is not an identifier", lock.ErrInvalidOptions, o.Channel)
	}
	t := pgx.Identifier(parts).Sanitize()
	return &Backend{
		pool: pool, table: o.Table, channel: o.Channel,
		sql: statements{
			create:  fmt.Sprintf(createTableSQL, t),
			obtain:  fmt.Sprintf(obtainSQL, t),
			undo:    fmt.Sprintf(undoSQL, t),
			renew:   fmt.Sprintf(renewSQL, t),
			held:    fmt.Sprintf(heldSQL, t),
			release: fmt.Sprintf(releaseSQL, t),
			advance: fmt.Sprintf(advanceSQL, t),
		},
	}, nil
}

// Migrate creates the lock table if it does not exist. It is idempotent and
// safe from several replicas at once: they take turns under a transaction-scoped
// advisory lock.
func (b *Backend) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrateLockSQL, b.table); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, b.sql.create)
		return err
	})
	if err != nil {
		return fmt.Errorf("pglock: migrate %s: %w", b.table, err)
	}
	return nil
}

// Obtain implements lock.Backend: every name or none, in one round trip: one
// statement for one name, one transaction of two statements for several.
func (b *Backend) Obtain(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no names", lock.ErrInvalidName)
	}
	if len(distinct(names)) != len(names) {
		return nil, fmt.Errorf("%w: a name twice in %q", lock.ErrInvalidName, names)
	}
	if block < 1 || ttl <= 0 {
		return nil, fmt.Errorf("%w: pglock: block %d and TTL %s must be above 0", lock.ErrInvalidOptions, block, ttl)
	}
	var tops []int64
	err := retry(ctx, func() error {
		var err error
		if len(names) == 1 {
			tops, err = b.obtainOne(ctx, names[0], value, ttl, block)
		} else {
			tops, err = b.obtainAll(ctx, names, value, ttl, block)
		}
		return err
	})
	if errors.Is(err, lock.ErrBusy) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("pglock: obtain: %w", err)
	}
	return tops, nil
}

func (b *Backend) obtainOne(ctx context.Context, name, value string, ttl time.Duration, block int64) ([]int64, error) {
	var got string
	var top int64
	err := b.pool.QueryRow(ctx, b.sql.obtain, []string{name}, value, ttl.Microseconds(), block).Scan(&got, &top)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, lock.ErrBusy
	}
	if err != nil {
		return nil, err
	}
	return []int64{top}, nil
}

// obtainAll sends the obtain and the undo (undoSQL) together in one batch:
// one round trip (and, on a connection that has not run them yet, one more to
// prepare them). pgx sends a batch as one pipeline with a single Sync, which
// PostgreSQL runs as one implicit transaction: the undo sees the obtain's rows,
// nothing is visible to others before the commit, and an error in either rolls
// both back. The rows are taken, and so locked, by the obtain alone, in its
// order; the undo only touches rows it already holds.
func (b *Backend) obtainAll(ctx context.Context, names []string, value string, ttl time.Duration, block int64) ([]int64, error) {
	batch := &pgx.Batch{}
	batch.Queue(b.sql.obtain, names, value, ttl.Microseconds(), block)
	batch.Queue(b.sql.undo, names, value, int64(len(names)), block)
	br := b.pool.SendBatch(ctx, batch)
	topOf := make(map[string]int64, len(names))
	rows, err := br.Query()
	if err == nil {
		var name string
		var top int64
		_, err = pgx.ForEachRow(rows, []any{&name, &top}, func() error {
			topOf[name] = top
			return nil
		})
	}
	var undone int64
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		undone = tag.RowsAffected()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, err
	case len(topOf) < len(names):
		return nil, lock.ErrBusy
	case undone != 0:
		return nil, fmt.Errorf("every row taken, yet %d undone", undone)
	}
	tops := make([]int64, len(names))
	for i, n := range names {
		tops[i] = topOf[n]
	}
	return tops, nil
}

// Renew implements lock.Backend: one statement, all the names or none.
func (b *Backend) Renew(ctx context.Context, names []string, value string, ttl time.Duration) error {
	var n int64
	err := retry(ctx, func() error {
		return b.pool.QueryRow(ctx, b.sql.renew, names, value, ttl.Microseconds(), int64(len(distinct(names)))).Scan(&n)
	})
	if err != nil {
		return fmt.Errorf("pglock: renew: %w", err)
	}
	if n == 0 {
		return lock.ErrNotHeld
	}
	return nil
}

// Held implements lock.Backend.
func (b *Backend) Held(ctx context.Context, name, value string) (bool, error) {
	var held bool
	err := retry(ctx, func() error {
		return b.pool.QueryRow(ctx, b.sql.held, name, value).Scan(&held)
	})
	if err != nil {
		return false, fmt.Errorf("pglock: check: %w", err)
	}
	return held, nil
}

// Release implements lock.Backend: the rows value holds are freed and announced
// on the channel, in one statement.
func (b *Backend) Release(ctx context.Context, names []string, value string) error {
	err := retry(ctx, func() error {
		var n int64
		return b.pool.QueryRow(ctx, b.sql.release, names, value, b.channel).Scan(&n)
	})
	if err != nil {
		return fmt.Errorf("pglock: release: %w", err)
	}
	return nil
}

// Advance implements lock.Backend.
func (b *Backend) Advance(ctx context.Context, name, value string, past int64) (int64, error) {
	var tok int64
	err := retry(ctx, func() error {
		return b.pool.QueryRow(ctx, b.sql.advance, name, value, past).Scan(&tok)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, lock.ErrNotHeld
	}
	if err != nil {
		return 0, fmt.Errorf("pglock: advance: %w", err)
	}
	return tok, nil
}

// retry runs op, and once more when it failed because its connection broke
// (a terminated session, a restarted server) and ctx still allows: the pool
// has dropped the broken connection, so the retry runs on another. Every
// statement here may run twice (see the package documentation).
func retry(ctx context.Context, op func() error) error {
	err := op()
	if err != nil && ctx.Err() == nil && connectionBroke(err) {
		err = op()
	}
	return err
}

// connectionBroke reports whether err says the connection failed, rather than
// that the statement did.
func connectionBroke(err error) bool {
	if pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P01 admin_shutdown (pg_terminate_backend), 57P02 crash_shutdown,
		// 57P03 cannot_connect_now; class 08 is connection exceptions.
		return strings.HasPrefix(pgErr.Code, "57P0") || strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}

func distinct(names []string) []string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	out := s[:0]
	for i, n := range s {
		if i == 0 || n != s[i-1] {
			out = append(out, n)
		}
	}
	return out
}

// Ping reports whether the database answers, for a service's readiness.
func (b *Backend) Ping(ctx context.Context) error { return b.pool.Ping(ctx) }

package pglock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Limits of the pool Open makes. A lock call is one short statement; a few
// connections serve a process's watchdogs and waiters (the local queue lets only
// the head of each resource's queue talk to the database), and the LISTEN
// connection is on top of these.
const (
	openMaxConns       = 4
	openConnectTimeout = 5 * time.Second
	openIdleTime       = 5 * time.Minute
	// DefaultApplicationName is the application_name of Open's sessions when the
	// URL sets none, so that they can be told apart in pg_stat_activity.
	DefaultApplicationName = "stockguard-lock"
)

// Open connects to the PostgreSQL of a postgres:// or postgresql:// URL (the
// service's DATABASE_URL forms: the URL's parameters, sslmode and
// application_name and pool_max_conns included, are honoured) with a small pool
// of its own, checks that the server answers, and migrates the lock table. The
// returned func closes the pool. An unreachable server fails within ctx's
// deadline, or the connect timeout (5s unless the URL's connect_timeout says
// otherwise), whichever is first.
func Open(ctx context.Context, url string, opt *Options) (*Backend, func(), error) {
	if !strings.HasPrefix(url, "postgres://") && !strings.HasPrefix(url, "postgresql://") {
		return nil, nil, fmt.Errorf("pglock: open: not a postgres:// or postgresql:// URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, nil, fmt.Errorf("pglock: open: %w", err) // pgconn redacts the password
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = openMaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = openConnectTimeout
	}
	cfg.MaxConnIdleTime = openIdleTime
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = DefaultApplicationName
	}
	where := fmt.Sprintf("%s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("pglock: open %s: %w", where, err)
	}
	b, err := New(pool, opt)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, cfg.ConnConfig.ConnectTimeout)
		if err = pool.Ping(pctx); err != nil {
			err = fmt.Errorf("pglock: open: PostgreSQL at %s is unreachable: %w", where, err)
		} else {
			err = b.Migrate(ctx)
		}
		cancel()
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return b, pool.Close, nil
}

// Importing the package registers postgres:// and postgresql:// with
// lock.Open.
func init() {
	lock.Register("postgres", open)
	lock.Register("postgresql", open)
}

// open is the lock.Opener of postgres:// URLs: Open with the default Options.
// The Settings' Namespace is not used: one table per database holds every
// resource, as Open's callers have always had it. The check that PostgreSQL answers is bounded
// by ctx and the URL's connect_timeout (5s by default), as Open's is.
func open(ctx context.Context, rawURL string, _ *lock.Settings) (*lock.Service, error) {
	b, closePool, err := Open(ctx, rawURL, nil)
	if err != nil {
		return nil, err
	}
	return &lock.Service{Backend: b, Kind: "postgres", Ping: b.Ping, Close: closePool}, nil
}

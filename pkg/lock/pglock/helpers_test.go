package pglock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/pglock"
)

// baseURL is the test server, STOCKGUARD_TEST_DATABASE_URL; the test is skipped
// without it, or fails under STOCKGUARD_TEST_REQUIRE_REAL=1. (pkg/ may not import
// internal/testenv, so this is its rule again.)
func baseURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("STOCKGUARD_TEST_DATABASE_URL")
	switch {
	case u == "" && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1":
		tb.Fatal("STOCKGUARD_TEST_REQUIRE_REAL=1 but STOCKGUARD_TEST_DATABASE_URL is not set")
	case u == "":
		tb.Skip("STOCKGUARD_TEST_DATABASE_URL is not set")
	}
	return u
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// space is one test's lock table, dropped when the test ends.
type space struct {
	url   string
	table string
}

func newSpace(tb testing.TB) *space {
	tb.Helper()
	s := &space{url: baseURL(tb), table: "pglock_test_" + randomID()}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.url)
		if err != nil {
			tb.Logf("drop %s: %v", s.table, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{s.table}.Sanitize()); err != nil {
			tb.Logf("drop %s: %v", s.table, err)
		}
	})
	return s
}

// pool opens a pool of its own on the space's server, its sessions named app.
func (s *space) pool(tb testing.TB, app string) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

// open returns a Backend on the space, on a pool of its own (as a new process
// would open it), migrated.
func (s *space) open(tb testing.TB, app string) *pglock.Backend {
	tb.Helper()
	b, err := pglock.New(s.pool(tb, app), &pglock.Options{Table: s.table})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return b
}

func newClient(tb testing.TB, b lock.Backend, opt *lock.Options) *lock.Client {
	tb.Helper()
	c, err := lock.NewClient(b, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// waitFor polls cond until it holds, or fails the test at ctx's end.
func waitFor(ctx context.Context, tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: not before the deadline", what)
		case <-tick.C:
		}
	}
}

// metricValue reads one counter or gauge from m.
func metricValue(tb testing.TB, m *lockprom.Metrics, name string, labels map[string]string) float64 {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range mt.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if !maps.Equal(got, labels) {
				continue
			}
			if c := mt.GetCounter(); c != nil {
				return c.GetValue()
			}
			return mt.GetGauge().GetValue()
		}
	}
	return 0
}

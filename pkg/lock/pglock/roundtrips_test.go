package pglock_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/pglock"
)

// turnConn counts round trips on a connection: a write that follows a read (or
// the connection's first write) begins one.
type turnConn struct {
	net.Conn
	t *turns
}

type turns struct {
	mu      sync.Mutex
	n       int
	reading bool
}

func (c *turnConn) Write(p []byte) (int, error) {
	c.t.mu.Lock()
	if c.t.reading || c.t.n == 0 {
		c.t.n++
	}
	c.t.reading = false
	c.t.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *turnConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.t.mu.Lock()
	c.t.reading = true
	c.t.mu.Unlock()
	return n, err
}

// since returns the round trips since the last call.
func (t *turns) since() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.n
	t.n, t.reading = 0, false
	return n
}

// Every call on several names is one round trip: the multi-name obtain (granted
// or busy), the renewal and the release, counted on the pool's one connection
// once its statements are prepared.
func TestRoundTripsPerCall(t *testing.T) {
	s := newSpace(t)
	other := s.open(t, "pglock-rt-other")
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false } // a ping is a round trip of its own
	tt := &turns{}
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &turnConn{Conn: c, t: tt}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool, &pglock.Options{Table: s.table})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const ttl = 10 * time.Second
	calls := func(v string) []func() error {
		return []func() error{
			func() error { _, err := b.Obtain(ctx, names, v, ttl, 1); return err },
			func() error { return b.Renew(ctx, names, v, ttl) },
			func() error { return b.Release(ctx, names, v) },
			func() error { _, err := b.Obtain(ctx, names[:1], v, ttl, 1); return err },
			func() error { return b.Release(ctx, names[:1], v) },
		}
	}
	for _, call := range calls("warm") { // prepares every statement on the connection
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	tt.since()
	for i, call := range calls("measured") {
		if err := call(); err != nil {
			t.Fatal(err)
		}
		if n := tt.since(); n != 1 {
			t.Errorf("call %d on %d names: %d round trips, want 1", i, len(names), n)
		}
	}
	before, err := b.Obtain(ctx, names[:1], "before", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, names[:1], "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Obtain(ctx, names[5:6], "holder", ttl, 1); err != nil {
		t.Fatal(err)
	}
	tt.since()
	if _, err := b.Obtain(ctx, names, "refused", ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while %s is held: %v, want ErrBusy", names[5], err)
	}
	if n := tt.since(); n != 1 {
		t.Errorf("busy obtain of %d names: %d round trips, want 1", len(names), n)
	}
	for _, n := range names {
		if held, err := b.Held(ctx, n, "refused"); err != nil || held {
			t.Fatalf("%s held by the refused obtain (%v, %v)", n, held, err)
		}
	}
	// The refused obtain gave back the tokens it had added, too.
	after, err := b.Obtain(ctx, names[:1], "after", ttl, 1)
	if err != nil {
		t.Fatal(err)
	}
	if after[0] != before[0]+1 {
		t.Errorf("%s: token %d after the refused obtain, want %d (the one before, plus 1)", names[0], after[0], before[0]+1)
	}
}

package ratelimit

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockguard/stockguard/internal/testenv"
)

// gate holds every Redis command until it is opened, and counts them.
type gate struct {
	open  chan struct{}
	once  sync.Once
	calls atomic.Int64
}

func (g *gate) Open() { g.once.Do(func() { close(g.open) }) }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.calls.Add(1)
		<-g.open
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestConcurrentRequestsShareOneLease: forty requests of one client arrive
// together on one replica; one leases from Redis while the other 39 wait
// for its chunk (of 50), and all are allowed on that one call.
func TestConcurrentRequestsShareOneLease(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	l := New(rdb, Options{Timeout: time.Minute, Logger: discard})
	lim := Limit{PerSecond: 1000, Burst: 1000}
	// Load the script first, so that the lease is one EVALSHA.
	require.True(t, l.Allow(t.Context(), "warm", lim).Allowed)
	g := &gate{open: make(chan struct{})}
	t.Cleanup(g.Open)
	rdb.AddHook(g)
	const before int64 = 0

	const n = 40
	results := make(chan Decision, n)
	for range n {
		go func() { results <- l.Allow(t.Context(), "c", lim) }()
	}
	b := l.bucket(bucketKey{clientKind, "c"})
	deadline := time.Now().Add(30 * time.Second)
	for b.waiters.Load() < n-1 { // the other requests wait for the one lease
		require.True(t, time.Now().Before(deadline), "%d requests waiting", b.waiters.Load())
		runtime.Gosched()
	}
	require.Equal(t, before+1, g.calls.Load(), "one lease in flight")
	g.Open()
	for range n {
		require.True(t, (<-results).Allowed)
	}
	require.Equal(t, before+1, g.calls.Load(), "all on one call")
}

// TestIdleBucketsAreSwept: a replica forgets clients idle for longer than
// their buckets take to refill, once a minute.
func TestIdleBucketsAreSwept(t *testing.T) {
	mr := miniredis.RunT(t)
	clk := testenv.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	mr.SetTime(clk.Now())
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	l := New(rdb, Options{Now: clk.Now, Logger: discard, Timeout: time.Minute})
	lim := Limit{PerSecond: 10, Burst: 20}
	for _, k := range []string{"a", "b", "c"} {
		require.True(t, l.Allow(t.Context(), k, lim).Allowed)
	}
	require.Equal(t, 3, l.size())
	clk.Add(30 * time.Second)
	require.True(t, l.Allow(t.Context(), "d", lim).Allowed)
	require.Equal(t, 4, l.size(), "not a minute since the last sweep")
	clk.Add(31 * time.Second)
	mr.SetTime(clk.Now())
	require.True(t, l.Allow(t.Context(), "a", lim).Allowed)
	require.Equal(t, 1, l.size(), "all idle past their refill (d for 31s, full after 2s): swept; a made anew")
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func (l *Limiter) size() int {
	n := 0
	l.buckets.Range(func(any, any) bool { n++; return true })
	return n
}

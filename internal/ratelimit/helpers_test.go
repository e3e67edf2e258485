package ratelimit_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/testenv"
)

// start is where the fake clocks begin: a whole second, so that miniredis's
// TIME (seconds and microseconds) reads it exactly.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeTime is one clock for the limiters and the miniredis they share: Add
// moves both, so the shared bucket and the leases agree on the time.
type fakeTime struct {
	*testenv.Clock
	mr *miniredis.Miniredis
}

func (f fakeTime) Add(d time.Duration) {
	f.Clock.Add(d)
	f.mr.SetTime(f.Now())
}

// newMini returns a miniredis on a fake clock, and a client of it whose
// commands are counted.
func newMini(t *testing.T) (fakeTime, *redis.Client, *callCounter) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(start)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	calls := &callCounter{}
	rdb.AddHook(calls)
	return fakeTime{Clock: testenv.NewClock(start), mr: mr}, rdb, calls
}

// callCounter counts the commands a client sends (a go-redis hook).
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) Load() int64 { return c.n.Load() }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// cleanBuckets removes the buckets of a namespace from the test's Redis when
// the test ends (redis_rate's keys start with "rate:", which the test Redis's
// own cleanup does not look for). They expire by themselves too.
func cleanBuckets(t testing.TB, rdb redis.UniversalClient, ns string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, "rate:{"+ns+":*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Logf("cleaning Redis: %v", err)
		}
	})
}

// logRecorder is a slog.Handler that keeps the records' levels and messages.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count returns how many records of the level were logged.
func (r *logRecorder) count(level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level {
			n++
		}
	}
	return n
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// patient is the Timeout of the tests that are not about Redis failing: a
// call to miniredis can take long on a busy machine, and a call timed out
// would send the replica to its fallback.
const patient = time.Minute

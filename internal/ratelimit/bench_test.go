package ratelimit_test

import (
	"strconv"
	"testing"

	"github.com/stockguard/stockguard/internal/ratelimit"
	"github.com/stockguard/stockguard/internal/testenv"
)

// BenchmarkAllow measures Allow in the steady state on the test Redis (a
// real one when STOCKGUARD_TEST_REDIS_URL is set), and reports the Redis
// commands it sent per request (rediscalls/op):
//
//   - one-key: one client well under a limit of 1e7/s, burst 100000 (chunks
//     of 5000);
//   - one-key-parallel: the same from GOMAXPROCS goroutines, sharing leases;
//   - many-keys: 1000 clients in turn, each under a limit of 10000/s, burst
//     10000 (chunks of 500); few enough that a round of them, leases
//     included, is well within LeaseTTL even on a busy machine, so that
//     leases do not expire between a client's turns;
//   - over-limit: one client far over 100/s, burst 100: refused on the
//     replica's word between chunks;
//   - chunk-1: one-key with chunks of one unit, a Redis call per request: what
//     leasing saves.
func BenchmarkAllow(b *testing.B) {
	env := testenv.NewRedis(b)
	cleanBuckets(b, env.Client(b), env.Namespace)
	newLimiter := func(b *testing.B, fraction float64) (*ratelimit.Limiter, *callCounter) {
		rdb := env.Client(b)
		calls := &callCounter{}
		rdb.AddHook(calls)
		return ratelimit.New(rdb, ratelimit.Options{Namespace: env.Namespace, LeaseFraction: fraction, Timeout: patient, Logger: discard}), calls
	}
	report := func(b *testing.B, calls *callCounter, local *int) {
		b.ReportMetric(float64(calls.Load())/float64(b.N), "rediscalls/op")
		if local != nil && *local > 0 {
			b.Fatalf("%d answers from the fallback: Redis did not answer", *local)
		}
	}
	fast := ratelimit.Limit{PerSecond: 1e7, Burst: 100000}

	b.Run("one-key", func(b *testing.B) {
		l, calls := newLimiter(b, 0)
		key := "cli_" + testenv.RandomID()
		local := 0
		for b.Loop() {
			if d := l.Allow(b.Context(), key, fast); d.Local {
				local++
			}
		}
		report(b, calls, &local)
	})
	b.Run("one-key-parallel", func(b *testing.B) {
		l, calls := newLimiter(b, 0)
		key := "cli_" + testenv.RandomID()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow(b.Context(), key, fast)
			}
		})
		report(b, calls, nil)
	})
	b.Run("many-keys", func(b *testing.B) {
		l, calls := newLimiter(b, 0)
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = "cli_" + testenv.RandomID() + strconv.Itoa(i)
		}
		lim := ratelimit.Limit{PerSecond: 10000, Burst: 10000}
		for _, k := range keys { // each client's first lease, outside the timing
			l.Allow(b.Context(), k, lim)
		}
		warm := calls.Load()
		local, i := 0, 0
		for b.Loop() {
			if d := l.Allow(b.Context(), keys[i%len(keys)], lim); d.Local {
				local++
			}
			i++
		}
		calls.n.Add(-warm)
		report(b, calls, &local)
	})
	b.Run("over-limit", func(b *testing.B) {
		l, calls := newLimiter(b, 0)
		key := "cli_" + testenv.RandomID()
		local := 0
		for b.Loop() {
			if d := l.Allow(b.Context(), key, ratelimit.Limit{PerSecond: 100, Burst: 100}); d.Local {
				local++
			}
		}
		report(b, calls, &local)
	})
	b.Run("chunk-1", func(b *testing.B) {
		l, calls := newLimiter(b, 1e-9)
		key := "cli_" + testenv.RandomID()
		local := 0
		for b.Loop() {
			if d := l.Allow(b.Context(), key, fast); d.Local {
				local++
			}
		}
		report(b, calls, &local)
	})
}

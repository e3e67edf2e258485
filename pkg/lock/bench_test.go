package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock"
)

// benchRedis prefers a private redis-server, so that INFO commandstats counts only
// the benchmark's own commands.
func benchRedis(b *testing.B) *testenv.Redis {
	if _, err := exec.LookPath("redis-server"); err == nil {
		return testenv.NewRedisAt(b, testenv.StartRedisServer(b).Addr)
	}
	return testenv.NewRedis(b)
}

func BenchmarkUncontended(b *testing.B) {
	env := benchRedis(b)
	c := newClient(b, env.Client(b), env.Namespace, nil)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if err := c.Do(ctx, []string{"A-1"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acquisitions/s")
}

// hotKeyResult keeps the last figures of each strategy so that the ratio can be
// reported from the same run.
var hotKeyResult = map[string][2]float64{} // handoffs/s, commands/acquisition

// BenchmarkHotKey: one key, 3 clients (separate pools, as 3 replicas) × 32
// goroutines. stockguard against plain bsm/redislock polling every 10ms.
func BenchmarkHotKey(b *testing.B) {
	const clients, perClient = 3, 32
	strategies := []struct {
		name string
		mk   func(b *testing.B, rdb *redis.Client, ns string) func(ctx context.Context, cs func()) error
	}{
		{"stockguard", func(b *testing.B, rdb *redis.Client, ns string) func(context.Context, func()) error {
			c := newClient(b, rdb, ns, nil)
			return func(ctx context.Context, cs func()) error {
				return c.Do(ctx, []string{"hot"}, func(context.Context, *lock.Grant) error { cs(); return nil })
			}
		}},
		{"redislock-polling", func(b *testing.B, rdb *redis.Client, ns string) func(context.Context, func()) error {
			rl := redislock.New(rdb)
			key := lock.Keys{Namespace: ns}.Lock("hot")
			return func(ctx context.Context, cs func()) error {
				lk, err := rl.Obtain(ctx, key, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
				if err != nil {
					return err
				}
				cs()
				return lk.Release(context.Background())
			}
		}},
	}
	for _, s := range strategies {
		b.Run(s.name, func(b *testing.B) {
			env := benchRedis(b)
			admin := env.Client(b)
			var do []func(context.Context, func()) error
			for range clients {
				do = append(do, s.mk(b, env.Client(b), env.Namespace))
			}
			var counter, inside, overlaps atomic.Int64
			cs := func() {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				counter.Store(counter.Load() + 1) // a lost update shows a broken lock
				inside.Add(-1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			before, err := testenv.CommandCalls(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, clients*perClient)
			b.ResetTimer()
			for i := range clients * perClient {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := do[i%clients](ctx, cs); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			if err := errors.Join(collect(errs)...); err != nil {
				b.Fatal(err)
			}
			after, err := testenv.CommandCalls(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			if got := counter.Load(); got != int64(b.N) || overlaps.Load() != 0 {
				b.Fatalf("counter %d for %d acquisitions, %d overlaps", got, b.N, overlaps.Load())
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			perAcq := float64(after-before) / float64(b.N)
			hotKeyResult[s.name] = [2]float64{rate, perAcq}
			b.ReportMetric(rate, "handoffs/s")
			b.ReportMetric(perAcq, "cmds/acq")
		})
	}
	ours, base := hotKeyResult["stockguard"], hotKeyResult["redislock-polling"]
	if base[0] > 0 && base[1] > 0 {
		b.Logf("stockguard vs polling: %.1fx handoffs/s, %.2fx commands per acquisition", ours[0]/base[0], ours[1]/base[1])
		fmt.Printf("RATIO handoffs/s %.2fx commands/acq %.3fx\n", ours[0]/base[0], ours[1]/base[1])
	}
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// The micro-benchmarks measure every lock backend with the same loops:
// uncontended acquire and release from one goroutine, and a hot key that 3
// clients (separate connections, as 3 replicas) × 32 goroutines take in turn.
// Round trips are counted alike for all of them: the client's connections are
// dialled through countingDial, which counts Write calls (one request, or one
// pipelined batch, is one write). TestMain prints the medians per backend once
// the benchmarks have run.

// benchBackend is one lock service under test.
type benchBackend struct {
	name string
	// open starts or reaches the service for one benchmark run. It skips the
	// benchmark when the service is missing (fails under
	// STOCKGUARD_TEST_REQUIRE_REAL=1).
	open func(b *testing.B) *benchEnv
}

// benchEnv is one opened lock service.
type benchEnv struct {
	// client returns a new Client on its own connections, counted in writes.
	client func(b *testing.B, writes *atomic.Int64) *lock.Client
	// commands, when set, sums the server's INFO commandstats (Redis only).
	commands func(ctx context.Context) (int64, error)
	// redis, when set, is the Redis the backend runs on, for the plain
	// bsm/redislock baselines.
	redis *testRedis
}

// benchBackends lists the lock services, in the order of the final table;
// each backend's file adds itself.
var benchBackends []benchBackend

func addBenchBackend(bb benchBackend) {
	benchBackends = append(benchBackends, bb)
	sort.SliceStable(benchBackends, func(i, j int) bool {
		return benchOrder(benchBackends[i].name) < benchOrder(benchBackends[j].name)
	})
}

func benchOrder(name string) int {
	if i := slices.Index([]string{"redis", "redlock", "postgres", "etcd", "zk", "azblob"}, name); i >= 0 {
		return i
	}
	return 99
}

// skipOrFail skips a benchmark whose server is missing, or fails it under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func skipOrFail(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	benchSkipped.Store(msg, true)
	if requireReal() {
		b.Fatal(msg)
	}
	b.Skip(msg)
}

var benchSkipped sync.Map // message → true

// countingConn counts the writes on a client's connection: round trips.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// countingDial dials TCP and counts the writes of the connection in writes.
func countingDial(writes *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes}, nil
	}
}

// countedClient is a go-redis client of env whose writes are counted.
func countedClient(b *testing.B, r *testRedis, writes *atomic.Int64) *redis.Client {
	opt := r.Options()
	opt.ContextTimeoutEnabled = true
	opt.Dialer = countingDial(writes)
	c := redis.NewClient(opt)
	b.Cleanup(func() { _ = c.Close() })
	return c
}

func init() {
	addBenchBackend(benchBackend{name: "redis", open: func(b *testing.B) *benchEnv {
		if _, err := exec.LookPath("redis-server"); err != nil {
			skipOrFail(b, "redis: redis-server is not on the PATH")
		}
		env := newRedisAt(b, startRedisServer(b).Addr)
		admin := env.Client(b)
		return &benchEnv{
			client: func(b *testing.B, writes *atomic.Int64) *lock.Client {
				return newClient(b, countedClient(b, env, writes), env.Namespace, nil)
			},
			commands: func(ctx context.Context) (int64, error) { return commandCalls(ctx, admin) },
			redis:    env,
		}
	}})
}

// benchRuns keeps every run's figures, backend → figure → runs, for the medians
// TestMain prints.
var benchRuns = struct {
	sync.Mutex
	m map[string]map[string][]float64
}{m: map[string]map[string][]float64{}}

func record(backend, figure string, v float64) {
	benchRuns.Lock()
	defer benchRuns.Unlock()
	if benchRuns.m[backend] == nil {
		benchRuns.m[backend] = map[string][]float64{}
	}
	benchRuns.m[backend][figure] = append(benchRuns.m[backend][figure], v)
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// measured reports whether b is a measured run, not the one-iteration probe the
// framework may run first.
func measured(b *testing.B) bool { return b.N >= 100 }

// BenchmarkUncontended: acquire and release one key from one goroutine, per
// backend. On Redis, iteration by iteration, it alternates with plain
// bsm/redislock Obtain and Release (which issue no fencing token) on the same
// server, so that both see the same machine, and reports their ratio.
func BenchmarkUncontended(b *testing.B) {
	for _, bb := range benchBackends {
		b.Run(bb.name, func(b *testing.B) {
			env := bb.open(b)
			ctx := context.Background()
			var writes atomic.Int64
			c := env.client(b, &writes)
			noop := func(context.Context, *lock.Grant) error { return nil }
			do := func() {
				if err := c.Do(ctx, []string{"A-1"}, noop); err != nil {
					b.Fatal(err)
				}
			}
			var rl *redislock.Client
			var rlKey string
			if env.redis != nil {
				rl = redislock.New(countedClient(b, env.redis, new(atomic.Int64)))
				rlKey = redislease.Keys{Namespace: env.redis.Namespace}.Lock("B-1")
			}
			plain := func() {
				lk, err := rl.Obtain(ctx, rlKey, 10*time.Second, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := lk.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			do() // connections dialled and scripts loaded before the count starts
			if rl != nil {
				plain()
			}
			writes.Store(0)
			var spent [2]time.Duration
			i := 0
			for b.Loop() {
				if rl == nil {
					start := time.Now()
					do()
					spent[0] += time.Since(start)
					continue
				}
				// Alternate which goes first, so that neither always runs right
				// after the other.
				for k := range 2 {
					start := time.Now()
					if (i+k)%2 == 0 {
						do()
						spent[0] += time.Since(start)
					} else {
						plain()
						spent[1] += time.Since(start)
					}
				}
				i++
			}
			rate := float64(b.N) / spent[0].Seconds()
			rtt := float64(writes.Load()) / float64(b.N)
			b.ReportMetric(rate, "acq/s")
			b.ReportMetric(rtt, "rtt/acq")
			if measured(b) {
				record(bb.name, "uncontended acq/s", rate)
				record(bb.name, "uncontended rtt/acq", rtt)
			}
			if rl != nil {
				base := float64(b.N) / spent[1].Seconds()
				b.ReportMetric(base, "redislock-acq/s")
				b.ReportMetric(rate/base, "x-redislock")
				if measured(b) {
					record(bb.name, "redislock acq/s", base)
					record(bb.name, "x redislock", rate/base)
				}
			}
		})
	}
}

// BenchmarkHotKey: one key, 3 clients (separate connections, as 3 replicas) × 32
// goroutines, per backend; on Redis also plain bsm/redislock polling every 10ms.
func BenchmarkHotKey(b *testing.B) {
	type mkDo func(b *testing.B, writes *atomic.Int64) func(ctx context.Context, cs func()) error
	type strategy struct {
		name string
		open func(b *testing.B) (*benchEnv, mkDo)
	}
	var strategies []strategy
	for _, bb := range benchBackends {
		strategies = append(strategies, strategy{bb.name, func(b *testing.B) (*benchEnv, mkDo) {
			env := bb.open(b)
			return env, func(b *testing.B, writes *atomic.Int64) func(context.Context, func()) error {
				c := env.client(b, writes)
				return func(ctx context.Context, cs func()) error {
					return c.Do(ctx, []string{"hot"}, func(context.Context, *lock.Grant) error { cs(); return nil })
				}
			}
		}})
		if bb.name == "redis" {
			strategies = append(strategies, strategy{"redis-polling", func(b *testing.B) (*benchEnv, mkDo) {
				env := bb.open(b)
				key := redislease.Keys{Namespace: env.redis.Namespace}.Lock("hot")
				return env, func(b *testing.B, writes *atomic.Int64) func(context.Context, func()) error {
					rl := redislock.New(countedClient(b, env.redis, writes))
					return func(ctx context.Context, cs func()) error {
						lk, err := rl.Obtain(ctx, key, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)})
						if err != nil {
							return err
						}
						cs()
						return lk.Release(context.WithoutCancel(ctx))
					}
				}
			}})
		}
	}
	for _, s := range strategies {
		b.Run(s.name, func(b *testing.B) {
			const clients, perClient = 3, 32
			env, mk := s.open(b)
			var writes atomic.Int64
			var do []func(context.Context, func()) error
			for range clients {
				do = append(do, mk(b, &writes))
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
			for _, d := range do { // connections dialled, scripts loaded
				if err := d(ctx, func() {}); err != nil {
					b.Fatal(err)
				}
			}
			var before int64
			if env.commands != nil {
				var err error
				if before, err = env.commands(ctx); err != nil {
					b.Fatal(err)
				}
			}
			writes.Store(0)
			perClientGrants := make([]atomic.Int64, clients)
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
						perClientGrants[i%clients].Add(1)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			if err := errors.Join(collect(errs)...); err != nil {
				b.Fatal(err)
			}
			if got := counter.Load(); got != int64(b.N) || overlaps.Load() != 0 {
				b.Fatalf("counter %d for %d acquisitions, %d overlaps", got, b.N, overlaps.Load())
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			rtt := float64(writes.Load()) / float64(b.N)
			least := int64(b.N)
			for i := range perClientGrants {
				least = min(least, perClientGrants[i].Load())
			}
			fairness := float64(least) * clients / float64(b.N) // 1: even shares; 0: a client starved
			b.ReportMetric(rate, "handoffs/s")
			b.ReportMetric(rtt, "rtt/acq")
			b.ReportMetric(fairness, "fairness")
			if measured(b) {
				record(s.name, "hot-key handoffs/s", rate)
				record(s.name, "hot-key rtt/acq", rtt)
				record(s.name, "hot-key fairness", fairness)
			}
			if env.commands != nil {
				after, err := env.commands(ctx)
				if err != nil {
					b.Fatal(err)
				}
				perAcq := float64(after-before) / float64(b.N)
				b.ReportMetric(perAcq, "cmds/acq")
				if measured(b) {
					record(s.name, "hot-key cmds/acq", perAcq)
				}
			}
		})
	}
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// TestMain prints, after the benchmarks, the medians of their runs per backend.
func TestMain(m *testing.M) {
	code := m.Run()
	printBenchSummary(os.Stdout)
	os.Exit(code)
}

func printBenchSummary(f *os.File) {
	benchRuns.Lock()
	defer benchRuns.Unlock()
	skipped := 0
	benchSkipped.Range(func(any, any) bool { skipped++; return true })
	if len(benchRuns.m) == 0 && skipped == 0 {
		return
	}
	figures := []string{"uncontended acq/s", "uncontended rtt/acq", "hot-key handoffs/s", "hot-key fairness", "hot-key rtt/acq", "hot-key cmds/acq"}
	names := []string{}
	for _, bb := range benchBackends {
		names = append(names, bb.name)
		if bb.name == "redis" {
			names = append(names, "redis-polling")
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nlock backends, medians of the runs (runs in brackets):\n")
	w := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "backend\t")
	for _, f := range figures {
		fmt.Fprintf(w, "%s\t", f)
	}
	fmt.Fprintln(w)
	for _, n := range names {
		runs := benchRuns.m[n]
		fmt.Fprintf(w, "%s\t", n)
		for _, f := range figures {
			if v, ok := runs[f]; ok {
				fmt.Fprintf(w, "%s [%d]\t", formatFigure(medianOf(v)), len(v))
			} else {
				fmt.Fprint(w, "-\t")
			}
		}
		fmt.Fprintln(w)
	}
	_ = w.Flush()
	if r := benchRuns.m["redis"]; len(r["x redislock"]) > 0 {
		fmt.Fprintf(&sb, "stockguard vs redislock uncontended: %.2fx (median of %d interleaved runs; redislock %s acq/s)\n",
			medianOf(r["x redislock"]), len(r["x redislock"]), formatFigure(medianOf(r["redislock acq/s"])))
	}
	ours, base := benchRuns.m["redis"], benchRuns.m["redis-polling"]
	if len(ours["hot-key handoffs/s"]) > 0 && len(base["hot-key handoffs/s"]) > 0 {
		fmt.Fprintf(&sb, "stockguard (redis) vs redislock polling, hot key: %.1fx handoffs/s, %.3fx Redis commands per acquisition, %.3fx round trips per acquisition\n",
			medianOf(ours["hot-key handoffs/s"])/medianOf(base["hot-key handoffs/s"]),
			medianOf(ours["hot-key cmds/acq"])/medianOf(base["hot-key cmds/acq"]),
			medianOf(ours["hot-key rtt/acq"])/medianOf(base["hot-key rtt/acq"]))
	}
	benchSkipped.Range(func(k, _ any) bool {
		fmt.Fprintf(&sb, "skipped: %s\n", k)
		return true
	})
	_, _ = f.WriteString(sb.String())
}

func formatFigure(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// BenchmarkReplicaWait: acquire and release one key from one goroutine on a
// master with one replica, alternating, iteration by iteration, a client without
// and one with Options.Replicas = 1 (WAIT after every lease obtained), so that
// both see the same machine; it reports each one's rate and their ratio.
func BenchmarkReplicaWait(b *testing.B) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("needs redis-server for a private master and replica")
	}
	master, _ := startReplicated(b)
	env := newRedisAt(b, master.Addr)
	ctx := context.Background()
	plain := newClient(b, env.Client(b), env.Namespace, nil)
	waiting := newClientWith(b, env.Client(b), redislease.Options{Keys: redislease.Keys{Namespace: env.Namespace}, Replicas: 1}, nil)
	noop := func(context.Context, *lock.Grant) error { return nil }
	var spent [2]time.Duration
	for b.Loop() {
		for i, c := range []*lock.Client{plain, waiting} {
			start := time.Now()
			if err := c.Do(ctx, []string{"A-1"}, noop); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
		}
	}
	noWait, wait := float64(b.N)/spent[0].Seconds(), float64(b.N)/spent[1].Seconds()
	b.ReportMetric(noWait, "no-wait-acquisitions/s")
	b.ReportMetric(wait, "wait-acquisitions/s")
	b.ReportMetric(wait/noWait, "x-of-no-wait")
}

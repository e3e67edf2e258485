package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// The medians are per workload and lock service, and the ratios the medians of
// each round's ratio to the Redis run of the same round, not the ratio of the
// medians.
func TestLockPoints(t *testing.T) {
	run := func(s, w string, round int, rate, p99 float64) LockRun {
		return LockRun{Service: s, Round: round, Run: Run{Workload: w, OrdersPerSec: rate, P99: p99, Accepted: int64(rate),
			RedisCmds: int64(rate) * 2, DBWriteTxs: int64(rate) / 10, Consistent: true,
			CPU: CPU{Replicas: rate * 100e-6, Postgres: rate * 50e-6}}}
	}
	runs := []LockRun{
		run("redis", "hot", 1, 1000, 10), run("postgres", "hot", 1, 500, 40),
		run("redis", "hot", 2, 2000, 20), run("postgres", "hot", 2, 1600, 30),
		run("redis", "hot", 3, 1500, 10), run("postgres", "hot", 3, 900, 30),
		run("redis", "zipf", 1, 800, 5),
	}
	runs[5].LockCmds = 300
	runs[5].CPU.LockService = 900 * 30e-6 // postgres's round 3 with a lock server of 30 µs per order
	runs[3].Oversold, runs[3].Consistent = 2, false
	pts := lockPoints(runs, []string{"redis", "postgres"}, workloads)
	if len(pts) != 3 {
		t.Fatalf("%d points, want 3 (hot: redis, postgres; zipf: redis): %+v", len(pts), pts)
	}
	want := []LockPoint{
		{Workload: "hot", Service: "redis", Runs: 3, OrdersPerSec: 1500, P99: 10, Ratio: 1, P99Ratio: 1, RedisPerOrder: 2, DBWritesPerOrder: 0.1, Consistent: true,
			CPU: CPU{Replicas: 100e-6, Postgres: 50e-6}},
		// Rounds' ratios 0.5, 0.8, 0.6: median 0.6 (the ratio of the medians would be 900/1500 = 0.6 too, so p99 tells them apart).
		// p99 ratios 4, 1.5, 3: median 3 (the medians' ratio would be 30/10 = 3); orders/s median 900.
		{Workload: "hot", Service: "postgres", Runs: 3, OrdersPerSec: 900, P99: 30, Ratio: 0.6, P99Ratio: 3,
			RedisPerOrder: (6000 + 300) / 3000.0, DBWritesPerOrder: 0.1, Oversold: 2, Consistent: false,
			CPU: CPU{Replicas: 100e-6, Postgres: 50e-6, LockService: 900 * 30e-6 / 3000}},
		{Workload: "zipf", Service: "redis", Runs: 1, OrdersPerSec: 800, P99: 5, Ratio: 1, P99Ratio: 1, RedisPerOrder: 2, DBWritesPerOrder: 0.1, Consistent: true,
			CPU: CPU{Replicas: 100e-6, Postgres: 50e-6}},
	}
	for i, w := range want {
		g := pts[i]
		g.Title = ""
		if g.Workload != w.Workload || g.Service != w.Service || g.Runs != w.Runs || g.Oversold != w.Oversold || g.Consistent != w.Consistent ||
			!near(g.OrdersPerSec, w.OrdersPerSec) || !near(g.P99, w.P99) || !near(g.Ratio, w.Ratio) || !near(g.P99Ratio, w.P99Ratio) ||
			!near(g.RedisPerOrder, w.RedisPerOrder) || !near(g.DBWritesPerOrder, w.DBWritesPerOrder) || !near(g.CPU.Total(), w.CPU.Total()) {
			t.Errorf("point %d:\n got %+v\nwant %+v", i, g, w)
		}
	}

	// The medians of the rounds' ratios differ from the ratio of the medians
	// when the machine moves between rounds.
	moved := []LockRun{
		run("redis", "hot", 1, 1000, 10), run("redlock", "hot", 1, 900, 10),
		run("redis", "hot", 2, 3000, 10), run("redlock", "hot", 2, 600, 10),
		run("redis", "hot", 3, 500, 10), run("redlock", "hot", 3, 450, 10),
	}
	pts = lockPoints(moved, []string{"redis", "redlock"}, workloads)
	if got := pts[1].Ratio; !near(got, 0.9) {
		t.Errorf("redlock's ratio %.3f, want 0.9 (the rounds' 0.9, 0.2, 0.9), not 600/1000", got)
	}

	// No Redis run in a round: no ratio for it.
	pts = lockPoints([]LockRun{run("postgres", "zipf", 1, 100, 1)}, []string{"redis", "postgres"}, workloads)
	if len(pts) != 1 || pts[0].Ratio != 0 || pts[0].P99Ratio != 0 {
		t.Errorf("without Redis: %+v, want one point with no ratios", pts)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The section has a row per workload and lock service run, a "not run" row
// per workload for a lock service that was not, and says where each one's
// locks are; it replaces its former self in the report.
func TestLocksMarkdown(t *testing.T) {
	l := &LocksResults{Command: "go run ./cmd/bench -locks only -profile quick", When: "2026-01-02T03:04:05Z", Commit: "abc123",
		Strategy: "lock-batch", Replicas: 3, VUs: 64, Repeats: 3, Duration: 2e9, Warmup: 1e9, Cores: 2, LoadBefore: 7.5, LoadAfter: 8.25,
		Services: []LockService{{Name: "redis", Where: lockWhere["redis"]}, {Name: "redlock", Where: lockWhere["redlock"], NotRun: "no redis-server | on the PATH"},
			{Name: "postgres", Where: lockWhere["postgres"]}},
		Points: []LockPoint{
			{Workload: "hot", Title: "one hot SKU", Service: "redis", OrdersPerSec: 1234.4, P99: 56.6, Ratio: 1, P99Ratio: 1, RedisPerOrder: 3.5, DBWritesPerOrder: 0.0125, Consistent: true, PeakRSS: 63 << 19,
				Memory: Memory{RssAnon: 15 << 20, RssFile: 48 << 20}, CPU: CPU{Replicas: 200e-6, Redis: 40e-6, Postgres: 100e-6}},
			{Workload: "hot", Title: "one hot SKU", Service: "postgres", OrdersPerSec: 600, P99: 120, Ratio: 0.49, P99Ratio: 2.1, RedisPerOrder: 1, DBWritesPerOrder: 0.5, Consistent: true,
				CPU: CPU{Replicas: 200e-6, Postgres: 300e-6, LockService: 100e-6}},
			{Workload: "zipf", Title: "100 SKUs, zipf", Service: "redis", OrdersPerSec: 900, P99: 80, Ratio: 1, P99Ratio: 1, Consistent: true},
		}}
	var b bytes.Buffer
	l.markdown(&b, "benchmarks")
	md := b.String()
	for _, want := range []string{
		"## Lock services\n\nMeasured by `go run ./cmd/bench -locks only -profile quick` (profile quick) on 2026-01-02T03:04:05Z, commit abc123",
		"(redis, postgres, then again)",
		"2 cores", "load average 7.5 before this section and 8.2 after, above its 2 cores before it started: other work",
		"| one hot SKU | redis | 1234 | 57 ms | 1.00× | 1.00× | 340 | 3.50 | 0.013 | 31.5 MiB | 15.0 MiB (RssFile 48.0 MiB) | 0 oversold, consistent: true |\n",
		"| one hot SKU | redlock | not run: no redis-server \\| on the PATH | | | | | | | | | |\n",
		"| one hot SKU | postgres | 600 | 120 ms | 0.49× | 2.10× | 600 (100) | 1.00 | 0.500 | — | — | 0 oversold, consistent: true |\n",
		"| 100 SKUs, zipf | redis | 900 | 80 ms | 1.00× | 1.00× | – |",
		"| 100 SKUs, zipf | redlock | not run: ",
		"| 100 SKUs, zipf | redis | 900 | 80 ms | 1.00× | 1.00× |",
		"![orders/s and p99 per lock service and workload](benchmarks/locks.png)",
		"- **postgres**: the SKU locks and the sweeper's lease in a row per SKU in the table stockguard_locks of the bench's own PostgreSQL database, beside the store's tables.\n",
		"- **redlock**: the SKU locks and the sweeper's lease in three private redis-servers started by the bench (no persistence), a majority of them. Not run: no redis-server \\| on the PATH.\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "| 100 SKUs, zipf | postgres |") {
		t.Errorf("a row for a point not measured:\n%s", md)
	}

	report := "# B\n\n## Holds\n\nh\n\n## Lock services\n\nformer text\n\n## The strategies\n\ny\n"
	got := string(spliceHeading([]byte(report), b.Bytes(), locksHeading))
	if !strings.HasPrefix(got, "# B\n\n## Holds\n\nh\n\n"+md+"\n## The strategies\n\ny\n") || strings.Contains(got, "former text") {
		t.Errorf("spliced:\n%s", got)
	}
	added := string(spliceHeading([]byte("# B\n\n## Holds\n\nh\n\n## The strategies\n\ny\n"), []byte("## Lock services\n\nnew\n"), locksHeading))
	if want := "# B\n\n## Holds\n\nh\n\n## Lock services\n\nnew\n\n## The strategies\n\ny\n"; added != want {
		t.Errorf("added:\n got %q\nwant %q", added, want)
	}
}

// Nothing run: the section still says why, and the chart is not drawn.
func TestLocksNothingRun(t *testing.T) {
	l := &LocksResults{Strategy: "lock-batch", Services: []LockService{{Name: "redis", NotRun: "stockguard serve: x"}}}
	var b bytes.Buffer
	l.markdown(&b, "benchmarks")
	if !strings.Contains(b.String(), "| — | redis | not run: stockguard serve: x |") {
		t.Errorf("no not-run row:\n%s", b.String())
	}
	if err := l.chart(t.TempDir() + "/locks.png"); err != nil {
		t.Errorf("chart: %v", err)
	}
}

func TestFmtRatio(t *testing.T) {
	for _, tc := range []struct {
		r    float64
		want string
	}{{0, "—"}, {-1, "—"}, {1, "1.00×"}, {0.456, "0.46×"}} {
		if got := fmtRatio(tc.r); got != tc.want {
			t.Errorf("fmtRatio(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

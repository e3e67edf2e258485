package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/topology"
)

// The plain workload both generators run: one hot SKU with stock enough for
// every order, quantity 1, an Idempotency-Key per order, no retries or cancels.
const (
	vsK6VUs      = 64
	vsK6Duration = 6 * time.Second
	vsK6Rounds   = 4 // each round runs both; the order alternates (ABBA...)
	vsK6Stock    = 1_000_000_000
	vsK6Token    = "genbench-admin-token"
)

// genRun is one run of one generator.
type genRun struct {
	ordersPerSec float64
	p99ms        float64
	cpuPerReqUs  float64 // the generator's own user+system CPU over its requests
}

// generator is one contender: the command that runs it against baseURL, and
// how its summary file reads.
type generator struct {
	name  string
	cmd   func(ctx context.Context, baseURL, summary string) *exec.Cmd
	parse func(summary string) (accepted, reqs int64, p99ms float64, err error)
}

// BenchmarkGeneratorVsK6: loadtest must reach Grafana k6's orders/s at equal
// VUs on the real service, with under a fifth of its CPU per request. Each run
// gets a fresh PostgreSQL database (created, migrated by the replica's start,
// dropped after) and a fresh `stockguard serve` replica (default strategy, a
// Redis namespace of its own), so that no run pays for another's rows; the
// generators alternate k6, loadtest, loadtest, k6, ... so that a drift of the
// machine weighs on both. Medians per generator, and their ratio. Run with
// -benchtime 1x; needs k6 (go install go.k6.io/k6@v1.8.1), PostgreSQL and
// Redis (STOCKGUARD_TEST_DATABASE_URL, STOCKGUARD_TEST_REDIS_URL).
func BenchmarkGeneratorVsK6(b *testing.B) {
	k6, why := findK6()
	if k6 == "" {
		skipOrFail(b, "BenchmarkGeneratorVsK6 skipped: "+why)
	}
	dbURL, redisURL := os.Getenv("STOCKGUARD_TEST_DATABASE_URL"), os.Getenv("STOCKGUARD_TEST_REDIS_URL")
	if !strings.HasPrefix(dbURL, "postgres") || redisURL == "" {
		skipOrFail(b, "BenchmarkGeneratorVsK6 skipped: it needs STOCKGUARD_TEST_DATABASE_URL (postgres://...) and STOCKGUARD_TEST_REDIS_URL")
	}
	ctx := b.Context()
	dir := b.TempDir()
	bins, err := topology.Build(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	script, err := filepath.Abs("k6/orders.js")
	if err != nil {
		b.Fatal(err)
	}
	dur := strconv.Itoa(int(vsK6Duration.Seconds())) + "s"
	lt := generator{name: "loadtest",
		cmd: func(ctx context.Context, baseURL, summary string) *exec.Cmd {
			return exec.CommandContext(ctx, bins.Loadtest, "-url", baseURL, "-admin-token", vsK6Token,
				"-vus", strconv.Itoa(vsK6VUs), "-duration", dur, "-stock", strconv.Itoa(vsK6Stock), "-max-quantity", "1",
				"-multi", "0", "-retry", "0", "-abandon", "0", "-cancel", "0", "-summary-export", summary, "-quiet")
		},
		parse: parseK6Summary} // loadtest's -summary-export is k6's shape: one reader for both
	k6g := generator{name: "k6",
		cmd: func(ctx context.Context, baseURL, summary string) *exec.Cmd {
			return exec.CommandContext(ctx, k6, "run", "--quiet", "--no-usage-report", "--summary-export", summary,
				"-e", "BASE_URL="+baseURL, "-e", "ADMIN_TOKEN="+vsK6Token, "-e", "VUS="+strconv.Itoa(vsK6VUs),
				"-e", "DURATION="+dur, "-e", "STOCK="+strconv.Itoa(vsK6Stock), script)
		},
		parse: parseK6Summary}

	runs := map[string][]genRun{}
	for round := range vsK6Rounds {
		order := []generator{k6g, lt}
		if round%2 == 1 {
			order = []generator{lt, k6g}
		}
		for _, g := range order {
			r, err := runGenerator(ctx, b, bins.Stockguard, dbURL, redisURL, dir, g)
			if err != nil {
				b.Fatalf("round %d, %s: %v", round+1, g.name, err)
			}
			fmt.Printf("round %d %-8s %7.0f orders/s  p99 %6.1f ms  CPU %5.1f µs/request\n",
				round+1, g.name, r.ordersPerSec, r.p99ms, r.cpuPerReqUs)
			runs[g.name] = append(runs[g.name], r)
		}
	}

	med := func(name string, f func(genRun) float64) float64 {
		var v []float64
		for _, r := range runs[name] {
			v = append(v, f(r))
		}
		return median(v)
	}
	rate := func(r genRun) float64 { return r.ordersPerSec }
	p99 := func(r genRun) float64 { return r.p99ms }
	cpu := func(r genRun) float64 { return r.cpuPerReqUs }
	ltRate, k6Rate := med("loadtest", rate), med("k6", rate)
	ltCPU, k6CPU := med("loadtest", cpu), med("k6", cpu)
	b.ReportMetric(ltRate, "loadtest-orders/s")
	b.ReportMetric(k6Rate, "k6-orders/s")
	b.ReportMetric(ltRate/k6Rate, "ratio")
	b.ReportMetric(med("loadtest", p99), "loadtest-p99-ms")
	b.ReportMetric(med("k6", p99), "k6-p99-ms")
	b.ReportMetric(ltCPU, "loadtest-cpu-µs/req")
	b.ReportMetric(k6CPU, "k6-cpu-µs/req")

	fmt.Printf("\n%d VUs, hot SKU, %s per run, %d rounds (k6 first in odd rounds), a fresh database and replica per run; medians [runs]\n",
		vsK6VUs, vsK6Duration, vsK6Rounds)
	fmt.Printf("| generator | orders/s | p99 ms | CPU µs/request |\n|---|---|---|---|\n")
	for _, name := range []string{"k6", "loadtest"} {
		var rates []string
		for _, r := range runs[name] {
			rates = append(rates, fmt.Sprintf("%.0f", r.ordersPerSec))
		}
		fmt.Printf("| %s | %.0f [%s] | %.1f | %.1f |\n", name, med(name, rate), strings.Join(rates, " "), med(name, p99), med(name, cpu))
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	fmt.Printf("| loadtest/k6 | **%.2f×** (target >= 1: %s) | %.2f× | **%.2f×** (target < 0.20: %s) |\n\n",
		ltRate/k6Rate, verdict(ltRate >= k6Rate), med("loadtest", p99)/med("k6", p99), ltCPU/k6CPU, verdict(ltCPU < k6CPU/5))
}

// runGenerator runs g once against a fresh replica on a fresh database and
// drops both after.
func runGenerator(ctx context.Context, b *testing.B, stockguard, dbURL, redisURL, dir string, g generator) (genRun, error) {
	id := randomID()
	db, err := freshDatabase(ctx, dbURL, "genbench_"+id)
	if err != nil {
		return genRun{}, err
	}
	defer db.drop(ctx, b)
	ns := "genbench-" + id
	env := append(cleanEnv(), "DATABASE_URL="+db.url, "REDIS_URL="+redisURL, "STOCKGUARD_NAMESPACE="+ns,
		"STOCKGUARD_ADMIN_TOKEN="+vsK6Token, "STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOG_LEVEL=error")
	proc, baseURL, err := topology.StartReplica(ctx, stockguard, env)
	if err != nil {
		return genRun{}, fmt.Errorf("replica: %w", err)
	}
	defer func() {
		topology.StopAll([]*exec.Cmd{proc})
		topology.DropNamespace(ctx, redisURL, ns, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}()
	summary := filepath.Join(dir, g.name+"-"+id+".json")
	cmd := g.cmd(ctx, baseURL, summary)
	if out, err := cmd.CombinedOutput(); err != nil {
		return genRun{}, fmt.Errorf("%w\n%s", err, lastLinesOf(out, 15))
	}
	accepted, reqs, p99, err := g.parse(summary)
	if err != nil {
		return genRun{}, err
	}
	if reqs == 0 || accepted == 0 {
		return genRun{}, fmt.Errorf("no orders placed (%d requests)", reqs)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// The same window for both: the configured run. Each finishes the requests
	// in flight at its end, and neither counts its setup.
	return genRun{ordersPerSec: float64(accepted) / vsK6Duration.Seconds(), p99ms: p99,
		cpuPerReqUs: float64(cpu.Microseconds()) / float64(reqs)}, nil
}

// parseK6Summary reads a --summary-export file, k6's or loadtest's: counters
// have a count, trends the stats the script lists in summaryTrendStats.
func parseK6Summary(path string) (accepted, reqs int64, p99 float64, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, err
	}
	var s struct {
		Metrics struct {
			Accepted struct {
				Count float64 `json:"count"`
			} `json:"orders_accepted"`
			Reqs struct {
				Count float64 `json:"count"`
			} `json:"http_reqs"`
			Duration struct {
				P99 *float64 `json:"p(99)"`
			} `json:"http_req_duration"`
		} `json:"metrics"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, 0, 0, fmt.Errorf("k6 summary: %w", err)
	}
	if s.Metrics.Duration.P99 == nil {
		return 0, 0, 0, fmt.Errorf("k6 summary %s has no http_req_duration p(99): summaryTrendStats must list it", path)
	}
	return int64(s.Metrics.Accepted.Count), int64(s.Metrics.Reqs.Count), *s.Metrics.Duration.P99, nil
}

// freshDB is a PostgreSQL database of its own on the server of a test URL.
type freshDB struct {
	admin, name, url string
}

func freshDatabase(ctx context.Context, base, name string) (*freshDB, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	d := &freshDB{admin: base, name: name}
	if err := d.exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	own := *u
	own.Path = "/" + name
	q := own.Query()
	q.Del("search_path") // the new database's public schema
	own.RawQuery = q.Encode()
	d.url = own.String()
	return d, nil
}

func (d *freshDB) exec(ctx context.Context, stmt string) error {
	db, err := gormstore.Open(d.admin)
	if err != nil {
		return err
	}
	sqlDB, _ := db.DB()
	defer func() { _ = sqlDB.Close() }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := db.WithContext(ctx).Exec(stmt).Error; err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// drop removes the database once its replica stopped (FORCE: a connection
// the replica left behind does not keep it).
func (d *freshDB) drop(ctx context.Context, b *testing.B) {
	if err := d.exec(ctx, "DROP DATABASE IF EXISTS "+d.name+" WITH (FORCE)"); err != nil {
		b.Errorf("drop the run's database: %v", err)
	}
}

// cleanEnv is this process's environment without the service's settings, so
// that the replica runs on its defaults (the default strategy among them).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "STOCKGUARD_") || k == "DATABASE_URL" || k == "REDIS_URL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// findK6 is the k6 binary on the PATH, or where go install puts it ($GOBIN,
// else $GOPATH/bin, as make bench-micro's scripts/bench-tools.sh looks); empty,
// and why, when there is none.
func findK6() (path, why string) {
	if p, err := exec.LookPath("k6"); err == nil {
		return p, ""
	}
	var dirs []string
	if out, err := exec.CommandContext(context.Background(), "go", "env", "GOBIN").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(context.Background(), "go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(dir, "bin"))
		}
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, "k6")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, ""
		}
	}
	return "", "k6 is neither on the PATH nor in $(go env GOBIN) or $(go env GOPATH)/bin; install it with `go install go.k6.io/k6@v1.8.1`"
}

// skipOrFail skips with why, or fails when real services and tools are
// required (STOCKGUARD_TEST_REQUIRE_REAL=1); why is also printed, so that a
// skipped comparison is seen in make's output.
func skipOrFail(b testing.TB, why string) {
	b.Helper()
	fmt.Println(why)
	if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
		b.Fatal(why + " (STOCKGUARD_TEST_REQUIRE_REAL=1)")
	}
	b.Skip(why)
}

func median(v []float64) float64 {
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

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLinesOf(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

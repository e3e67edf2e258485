package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

const adminToken = "bench-admin-token"

// Run is one load generator run.
type Run struct {
	Strategy     string  `json:"strategy"`
	Round        int     `json:"round"`
	Workload     string  `json:"workload"`
	VUs          int     `json:"vus"`
	Accepted     int64   `json:"orders_accepted"`
	Refused      int64   `json:"orders_refused"`
	Reqs         int64   `json:"http_reqs"`
	FailedRatio  float64 `json:"http_req_failed"`
	Seconds      float64 `json:"duration_s"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P50          float64 `json:"p50_ms"`
	P95          float64 `json:"p95_ms"`
	P99          float64 `json:"p99_ms"`
	Oversold     int64   `json:"oversold"`
	Consistent   bool    `json:"consistent"`
	Unsettled    int64   `json:"orders_unsettled"`
	Mismatches   int     `json:"mismatches"`
	// Split is the lines a 201 allocated from more than one location (runs
	// with stock in several).
	Split     int64 `json:"lines_split,omitempty"`
	RedisCmds int64 `json:"redis_commands"`
	// RedisTrips are the replicas' round trips to Redis over the run, from
	// their /metrics (0: not measured, a build or a results.json from before).
	RedisTrips int64 `json:"redis_round_trips,omitempty"`
	DBWriteTxs int64 `json:"db_write_transactions"`
	// CPU is what the replicas, Redis and PostgreSQL spent over the load phase.
	CPU CPU `json:"cpu"`
	// Memory is the highest RssAnon a replica reached over the load phase, with
	// its RssFile then (absent from results written before it was measured).
	Memory Memory `json:"memory,omitzero"`
	// The load phase, when the load generator's summary says.
	started, ended time.Time
}

// CPUPerOrder is the CPU seconds of the order path per accepted order.
func (r Run) CPUPerOrder() float64 { return r.CPU.Total() / float64(max(r.Accepted, 1)) }

// withBench builds the binaries into a temporary folder, creates and migrates
// the database, connects to Redis, runs f on them, and cleans up after: what
// every measurement (the strategies, the soak) starts from.
func withBench[T any](ctx context.Context, o options, log *slog.Logger,
	f func(bins topology.Binaries, db *gorm.DB, rdb *redis.Client) (T, error)) (T, error) {
	var zero T
	dir, err := os.MkdirTemp("", "stockguard-bench-")
	if err != nil {
		return zero, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	log.Info("building stockguard and the load generator")
	bins, err := topology.Build(ctx, dir)
	if err != nil {
		return zero, err
	}
	if err := createDatabase(ctx, o.databaseURL); err != nil {
		return zero, err
	}
	db, err := gormstore.Open(o.databaseURL)
	if err != nil {
		return zero, err
	}
	sqlDB, _ := db.DB()
	defer func() { _ = sqlDB.Close() }()
	if _, err := gormstore.Migrate(ctx, db); err != nil {
		return zero, err
	}
	ropt, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return zero, fmt.Errorf("redis url: %w", err)
	}
	rdb := redis.NewClient(ropt)
	defer func() { _ = rdb.Close() }()
	return f(bins, db, rdb)
}

// measure runs every strategy through every workload and VU count.
func measure(ctx context.Context, o options, log *slog.Logger) (*Results, error) {
	return withBench(ctx, o, log, func(bins topology.Binaries, db *gorm.DB, rdb *redis.Client) (*Results, error) {
		return measureAll(ctx, o, bins, db, rdb, log)
	})
}

func measureAll(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger) (*Results, error) {
	res := &Results{Profile: o.profile, Replicas: o.replicas, Default: string(orders.DefaultStrategy),
		RSS: map[string]int64{}, Memory: map[string]Memory{}, Sellout: map[string]Run{}}
	res.Machine = machine(ctx, db, rdb)
	if o.only() {
		if err := measureSections(ctx, o, bins, db, rdb, log, res, "only"); err != nil {
			return nil, err
		}
		return res, nil
	}
	if err := measureStrategies(ctx, o, bins, db, rdb, log, res); err != nil {
		return nil, err
	}
	if err := measureSections(ctx, o, bins, db, rdb, log, res, "on"); err != nil {
		return nil, err
	}
	res.summarize()
	return res, nil
}

// measureStrategies measures every strategy's block, with pgbench, in
// o.profile.Repeats rounds, into res.
func measureStrategies(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger, res *Results) error {
	rounds := o.profile.Repeats
	perBlock := len(o.workloads) * len(o.profile.VUs)
	total := rounds*(len(o.strategies)*perBlock+len(o.profile.VUs)) + len(o.strategies)
	log.Info("plan", "profile", o.profile.Name, "strategies", len(o.strategies), "rounds", rounds, "runs", total,
		"run_length", o.profile.Duration, "estimate", (time.Duration(total) * (o.profile.Duration + 1500*time.Millisecond)).Round(time.Minute))

	done := 0
	start := time.Now()
	tick := func() {
		done++
		left := time.Duration(float64(time.Since(start)) / float64(done) * float64(total-done))
		log.Info("progress", "runs", fmt.Sprintf("%d/%d", done, total), "left", left.Round(time.Second))
	}
	// Rounds in ABBA order (the strategies forward, then backward, ...): a drift
	// of the machine during the benchmark (the disk, the page cache, autovacuum)
	// then falls on every strategy alike instead of on the ones measured last.
	for round := range rounds {
		tps, err := pgbench(ctx, db, o.databaseURL, o.profile.PgBench)
		if err != nil {
			return interrupted(ctx, err)
		}
		log.Info("pgbench: guarded single-row UPDATE, 8 clients", "round", round+1, "tps", int(tps))
		res.PgBench = append(res.PgBench, tps)
		order := slices.Clone(o.strategies)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			b, err := measureBlock(ctx, o, bins, db, rdb, s, round, log, tick)
			if err != nil {
				return fmt.Errorf("%s: %w", s, interrupted(ctx, err))
			}
			res.Runs = append(res.Runs, b.runs...)
			res.CeilingRuns = append(res.CeilingRuns, b.ceiling...)
			if b.sellout != nil {
				res.Sellout[string(s)] = *b.sellout
			}
			res.RSS[string(s)] = max(res.RSS[string(s)], b.peakRSS)
			res.Memory[string(s)] = res.Memory[string(s)].higher(b.memory)
			if b.profile != nil {
				res.CPUProfile = b.profile
			}
		}
	}
	return nil
}

// measureSections measures, on the default strategy, the sections whose
// flag is mode ("only" or "on"), in the report's order, into res.
func measureSections(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger,
	res *Results, mode string) error {
	var err error
	if o.holds == mode {
		if res.Holds, err = measureHolds(ctx, o, bins, db, log, res.Machine); err != nil {
			return interrupted(ctx, err)
		}
	}
	if o.locks == mode {
		if res.Locks, err = measureLocks(ctx, o, bins, db, rdb, log, res.Machine); err != nil {
			return interrupted(ctx, err)
		}
	}
	if o.events == mode {
		if res.Events, err = measureEvents(ctx, o, bins, db, rdb, log, res.Machine); err != nil {
			return interrupted(ctx, err)
		}
	}
	if o.auth == mode {
		if res.Auth, err = measureAuth(ctx, o, bins, db, rdb, log, res.Machine); err != nil {
			return interrupted(ctx, err)
		}
	}
	if o.locations == mode {
		if res.Locations, err = measureLocations(ctx, o, bins, db, rdb, log, res.Machine); err != nil {
			return interrupted(ctx, err)
		}
	}
	return nil
}

// interrupted says so when ctx ended: the error is then its consequence.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("interrupted: every process the benchmark started is stopped")
	}
	return err
}

// block is what one strategy's turn in a round measured.
type block struct {
	runs    []Run
	ceiling []Run // the default strategy's turns only
	sellout *Run  // the first round only
	peakRSS int64
	memory  Memory      // the highest RssAnon of the metered runs
	profile *CPUProfile // the default strategy's first round only, when asked for
}

// ceilingPath is the trivial endpoint of the ceiling runs: no lock, no
// database, no cache; what is left is the HTTP path (generator, balancer,
// replica) on this machine.
const ceilingPath = "/healthz"

// measureBlock starts the replicas on s on emptied tables and runs every point
// once; in the first round, the sell-out too; for the default strategy, the
// ceiling at each VU count.
func measureBlock(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client,
	s orders.Strategy, round int, log *slog.Logger, tick func()) (b block, err error) {
	// One replica of the default strategy serves pprof in the first round, for
	// the CPU profile taken after the points.
	profile := s == orders.DefaultStrategy && round == 0 && o.cpuProfile > 0 &&
		slices.ContainsFunc(o.workloads, func(w Workload) bool { return w.Name == "hot" })
	var pprofAddr string
	var firstEnv []string
	if profile {
		if pprofAddr, err = freeLoopbackAddr(ctx); err != nil {
			return b, err
		}
		firstEnv = []string{"STOCKGUARD_PPROF_ADDR=" + pprofAddr}
	}
	c, err := startClusterFirst(ctx, o, bins, db, s, nil, log, firstEnv)
	if err != nil {
		return b, err
	}
	defer c.stop(ctx, o.redisURL, log)
	log.Info("strategy starts", "strategy", s, "round", round+1, "replicas", len(c.procs))
	pids := make([]int, len(c.procs))
	for i, p := range c.procs {
		pids[i] = p.Process.Pid
	}
	meter := newCPUMeter(ctx, rdb, pids)

	// A warm-up round, then ANALYZE: PostgreSQL plans for the tables it was told
	// of, and an emptied table is planned as empty (sequential scans) until
	// autovacuum looks again, which a short run would not live to see. The soak
	// (soak.go) measures without it, as tables grow.
	if _, err := loadRun(ctx, bins.Loadtest, c.lb.URL, rdb, db, workloads[0], slices.Max(o.profile.VUs), o.profile.Duration); err != nil {
		return b, fmt.Errorf("warm-up: %w", err)
	}
	if err := db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return b, fmt.Errorf("analyze: %w", err)
	}
	// Round trips are read from every replica before and after each point;
	// replicas that do not count them leave the figure out.
	trips := true
	point := func(w Workload, vus int) (Run, error) {
		before, terr := redisRoundTrips(ctx, c.urls)
		if terr != nil && trips {
			log.Warn("redis round trips not measured", "strategy", s, "err", terr)
			trips = false
		}
		r, err := meteredRun(ctx, meter, bins.Loadtest, c.lb.URL, rdb, db, w, vus, o.profile.Duration)
		r.Strategy, r.Round = string(s), round
		if after, aerr := redisRoundTrips(ctx, c.urls); trips && err == nil && aerr == nil {
			r.RedisTrips = after - before
		}
		tick()
		return r, err
	}
	for _, w := range o.workloads {
		for _, vus := range o.profile.VUs {
			r, err := point(w, vus)
			if err != nil {
				return b, err
			}
			log.Info("run", "strategy", s, "round", round+1, "workload", w.Name, "vus", vus, "orders/s", int(r.OrdersPerSec),
				"p99_ms", r.P99, "cpu_us_per_order", int(r.CPUPerOrder()*1e6), "oversold", r.Oversold, "consistent", r.Consistent)
			b.runs = append(b.runs, r)
			b.memory = b.memory.higher(r.Memory)
		}
	}
	if profile {
		// A run of its own, not among the points: its length is the profile's.
		p, r, err := profiledRun(ctx, meter, bins.Loadtest, c.lb.URL, rdb, db, workloads[0], profileVUs, o.cpuProfile, string(s), pprofAddr, o.out)
		if err != nil {
			return b, fmt.Errorf("cpu profile: %w", err)
		}
		log.Info("cpu profile", "strategy", s, "workload", p.Workload, "vus", p.VUs, "seconds", p.Seconds,
			"file", filepath.Join(o.out, p.File), "orders/s", int(p.OrdersPerSec), "cpu_us_per_order", int(1e6*p.CPUPerOrder))
		b.profile = p
		b.memory = b.memory.higher(r.Memory)
	}
	if s == orders.DefaultStrategy {
		for _, vus := range o.profile.VUs {
			r, err := ceilingRun(ctx, bins.Loadtest, c.lb.URL, vus, o.profile.Duration)
			if err != nil {
				return b, fmt.Errorf("ceiling: %w", err)
			}
			r.Round = round
			tick()
			log.Info("ceiling", "path", ceilingPath, "round", round+1, "vus", vus, "req/s", int(r.OrdersPerSec), "p99_ms", r.P99)
			b.ceiling = append(b.ceiling, r)
		}
	}
	if round == 0 {
		sell, err := point(sellout, slices.Max(o.profile.VUs))
		if err != nil {
			return b, err
		}
		log.Info("sell-out", "strategy", s, "sold", sell.Accepted, "oversold", sell.Oversold, "consistent", sell.Consistent)
		b.sellout = &sell
		b.memory = b.memory.higher(sell.Memory)
	}
	for _, p := range c.procs {
		b.peakRSS = max(b.peakRSS, vmHWM(p.Process.Pid))
	}
	return b, nil
}

// meteredRun is loadRun with the CPU time the order path spent over the load
// phase (from the summary's start and end of the load, between the seeding and
// the audit), or over the whole run when the summary does not say.
func meteredRun(ctx context.Context, m cpuMeter, bin, baseURL string, rdb *redis.Client, db *gorm.DB, w Workload, vus int, d time.Duration,
	extra ...string) (Run, error) {
	s := startSampler(m)
	r, err := loadRun(ctx, bin, baseURL, rdb, db, w, vus, d, extra...)
	samples, serr := s.finish()
	if err != nil {
		return r, err
	}
	if serr != nil {
		return r, serr
	}
	from, to := samples[0].at, samples[len(samples)-1].at
	if !r.started.IsZero() && r.ended.After(r.started) {
		from, to = r.started, r.ended
	}
	r.CPU = cpuBetween(samples, from, to)
	r.Memory = peakMemory(samples, from, to)
	return r, nil
}

// ceilingRun runs the load generator against the trivial endpoint: answers per
// second there are what the HTTP path allows at this many VUs.
func ceilingRun(ctx context.Context, bin, baseURL string, vus int, d time.Duration) (Run, error) {
	f, err := os.CreateTemp("", "bench-ceiling-*.json")
	if err != nil {
		return Run{}, err
	}
	_ = f.Close()
	defer func() { _ = os.Remove(f.Name()) }()
	load := exec.CommandContext(ctx, bin, "-url", baseURL, "-ceiling", ceilingPath, "-vus", strconv.Itoa(vus),
		"-duration", d.String(), "-summary-json", f.Name(), "-quiet")
	if out, err := load.CombinedOutput(); err != nil {
		return Run{}, fmt.Errorf("load generator: %w\n%s", err, lastLines(out, 10))
	}
	r, err := readSummary(f.Name())
	r.Strategy, r.Workload, r.VUs = "ceiling", "ceiling", vus
	return r, err
}

// loadRun runs the load generator once, with extra flags after the
// workload's (an -api-key), and reads its JSON summary, counting the Redis
// commands and database write transactions it caused.
func loadRun(ctx context.Context, bin, baseURL string, rdb *redis.Client, db *gorm.DB, w Workload, vus int, d time.Duration,
	extra ...string) (Run, error) {
	f, err := os.CreateTemp("", "bench-summary-*.json")
	if err != nil {
		return Run{}, err
	}
	_ = f.Close()
	defer func() { _ = os.Remove(f.Name()) }()
	cmdsBefore, err := redisCommands(ctx, rdb)
	if err != nil {
		return Run{}, err
	}
	xidBefore, err := nextXID(ctx, db)
	if err != nil {
		return Run{}, err
	}
	args := []string{"-url", baseURL, "-admin-token", adminToken, "-vus", strconv.Itoa(vus),
		"-duration", d.String(), "-skus", strconv.Itoa(w.SKUs), "-popularity", w.Popularity, "-stock", strconv.Itoa(w.Stock),
		"-max-quantity", "1", "-multi", strconv.FormatFloat(w.Multi, 'f', -1, 64), "-retry", "0", "-abandon", "0", "-cancel", "0",
		"-summary-json", f.Name(), "-quiet"}
	load := exec.CommandContext(ctx, bin, append(args, extra...)...)
	if out, err := load.CombinedOutput(); err != nil {
		return Run{}, fmt.Errorf("load generator: %w\n%s", err, lastLines(out, 10))
	}
	cmdsAfter, err := redisCommands(ctx, rdb)
	if err != nil {
		return Run{}, err
	}
	xidAfter, err := nextXID(ctx, db)
	if err != nil {
		return Run{}, err
	}
	r, err := readSummary(f.Name())
	if err != nil {
		return r, err
	}
	r.Workload, r.VUs = w.Name, vus
	r.RedisCmds, r.DBWriteTxs = cmdsAfter-cmdsBefore-1, xidAfter-xidBefore
	return r, nil
}

// readSummary reads the load generator's JSON summary.
func readSummary(path string) (Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Run{}, err
	}
	var sum struct {
		Seconds  float64   `json:"duration_s"`
		Reqs     int64     `json:"http_reqs"`
		Failed   float64   `json:"http_req_failed"`
		Accepted int64     `json:"orders_accepted"`
		Refused  int64     `json:"orders_refused"`
		Oversold int64     `json:"oversold"`
		Split    int64     `json:"lines_split"`
		Started  time.Time `json:"started_at"`
		Ended    time.Time `json:"ended_at"`
		Latency  struct {
			P50 float64 `json:"med"`
			P95 float64 `json:"p(95)"`
			P99 float64 `json:"p(99)"`
		} `json:"http_req_duration_ms"`
		Audit struct {
			Consistent bool     `json:"server_consistent"`
			Unsettled  int64    `json:"orders_unsettled"`
			Mismatches []string `json:"mismatches"`
		} `json:"audit"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return Run{}, fmt.Errorf("load generator summary: %w", err)
	}
	return Run{Accepted: sum.Accepted, Refused: sum.Refused, Reqs: sum.Reqs,
		FailedRatio: sum.Failed, Seconds: sum.Seconds, OrdersPerSec: float64(sum.Accepted) / max(sum.Seconds, 1e-9),
		P50: sum.Latency.P50, P95: sum.Latency.P95, P99: sum.Latency.P99, Oversold: sum.Oversold,
		Consistent: sum.Audit.Consistent, Unsettled: sum.Audit.Unsettled, Mismatches: len(sum.Audit.Mismatches), Split: sum.Split,
		started: sum.Started, ended: sum.Ended}, nil
}

// createDatabase creates the database of rawURL when it is missing, from the
// server's postgres database.
func createDatabase(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(name) {
		return fmt.Errorf("database name %q: want lowercase letters, digits and _", name)
	}
	admin := *u
	admin.Path = "/postgres"
	db, err := gormstore.Open(admin.String())
	if err != nil {
		return err
	}
	sqlDB, _ := db.DB()
	defer func() { _ = sqlDB.Close() }()
	var n int64
	if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM pg_database WHERE datname = ?", name).Scan(&n).Error; err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if n > 0 {
		return nil
	}
	return db.WithContext(ctx).Exec("CREATE DATABASE " + name).Error
}

var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbench runs the guarded single-row UPDATE that every order path ends in, one
// per transaction, with 8 clients on one row: the database alone.
func pgbench(ctx context.Context, db *gorm.DB, rawURL string, d time.Duration) (float64, error) {
	const sku = "pgbench-hot"
	if err := db.WithContext(ctx).Exec("INSERT INTO skus (sku, available, fence, updated_at) VALUES (?, ?, 0, now()) "+
		"ON CONFLICT (sku) DO UPDATE SET available = EXCLUDED.available", sku, int64(1)<<40).Error; err != nil {
		return 0, fmt.Errorf("pgbench row: %w", err)
	}
	script, err := os.CreateTemp("", "pgbench-*.sql")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.Remove(script.Name()) }()
	fmt.Fprintf(script, "UPDATE skus SET available = available - 1, updated_at = now() WHERE sku = '%s' AND available >= 1;\n", sku)
	_ = script.Close()
	out, err := exec.CommandContext(ctx, "pgbench", "-n", "-c", "8", "-j", strconv.Itoa(min(8, runtime.NumCPU())),
		"-T", strconv.Itoa(int(d.Seconds())), "-f", script.Name(), rawURL).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, lastLines(out, 10))
	}
	m := pgbenchTPS.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps:\n%s", lastLines(out, 10))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// redisCommands is the server's count of commands processed (this call's own
// INFO included: the caller subtracts one).
func redisCommands(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("redis info: %w", err)
	}
	v, ok := infoField(info, "total_commands_processed")
	if !ok {
		return 0, errors.New("redis info: no total_commands_processed")
	}
	return strconv.ParseInt(v, 10, 64)
}

func infoField(info, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// nextXID is the next transaction id PostgreSQL will assign: the difference
// between two readings counts the transactions that wrote, on the whole server
// (a read-only transaction takes none). Reading it takes none either.
func nextXID(ctx context.Context, db *gorm.DB) (int64, error) {
	var s string
	if err := db.WithContext(ctx).Raw("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").Scan(&s).Error; err != nil {
		return 0, fmt.Errorf("next xid: %w", err)
	}
	return strconv.ParseInt(s, 10, 64)
}

// vmHWM is a process's peak resident set in bytes, from /proc.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	v, ok := infoField(string(b), "VmHWM")
	if !ok {
		return 0
	}
	kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return kb << 10
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

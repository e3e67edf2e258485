// Command loadtest is stockguard's load generator, in the manner of Grafana k6:
// scenarios with k6's executors (constant-vus, ramping-vus, constant-arrival-rate,
// ramping-arrival-rate), checks, thresholds that fail the run, a live progress
// line, a k6-like summary, a JSON summary and an HTML chart, and what k6 does not
// have: an audit of every unit sold at the end. It speaks to the service over HTTP
// only, so it works against any deployment.
//
//	go run ./loadtest -url http://127.0.0.1:8080 -admin-token secret -vus 64 -duration 30s
//	go run ./loadtest -config loadtest/scenarios/hot-sku.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errAudit):
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(98) // worse than a threshold: the service broke a rule
	case errors.Is(err, errThresholds):
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(99) // k6's exit code for failed thresholds
	case err != nil:
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

var (
	errThresholds = errors.New("some thresholds failed")
	errAudit      = errors.New("the checkout audit failed")
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "scenario file (.yaml, .yml or .json); flags below describe one scenario otherwise")
	url := fs.String("url", envOr(getenv, "LOADTEST_URL", "http://127.0.0.1:8080"), "base URL of the service ($LOADTEST_URL)")
	token := fs.String("admin-token", getenv("STOCKGUARD_ADMIN_TOKEN"), "admin token, to seed stock and audit ($STOCKGUARD_ADMIN_TOKEN)")
	apiKey := fs.String("api-key", getenv("STOCKGUARD_API_KEY"), "a client's API key, sent with every order, hold and read (the admin token's requests keep the admin token); empty sends the admin token ($STOCKGUARD_API_KEY)")
	executor := fs.String("executor", ConstantVUs, "constant-vus, ramping-vus, constant-arrival-rate or ramping-arrival-rate")
	vus := fs.Int("vus", 32, "VUs (constant-vus), or preallocated VUs (arrival-rate)")
	maxVUs := fs.Int("max-vus", 0, "most VUs an arrival-rate executor may allocate (default: -vus)")
	duration := fs.Duration("duration", 10*time.Second, "how long to run")
	rateFlag := fs.Int("rate", 100, "iterations per second (constant-arrival-rate)")
	skus := fs.Int("skus", 1, "SKUs to spread orders over (1: one hot SKU)")
	popularity := fs.String("popularity", "uniform", "uniform or zipf")
	stock := fs.Int("stock", 100, "units seeded per SKU")
	maxQty := fs.Int("max-quantity", 3, "largest quantity per line")
	multi := fs.Float64("multi", 0.2, "share of multi-SKU orders")
	retry := fs.Float64("retry", 0.1, "share of orders retried with the same Idempotency-Key")
	abandon := fs.Float64("abandon", 0.3, "share of retried orders whose first attempt is abandoned")
	cancelShare := fs.Float64("cancel", 0.05, "share of placed orders cancelled")
	locations := fs.Int("locations", 1, "locations each SKU's stock is spread over: 1 keeps it in the default location; N > 1 makes loadtest-2 ... loadtest-N at setup")
	named := fs.Float64("named", 0, "share of order lines that name a location (one of the run's, at random)")
	unsplit := fs.Float64("unsplit", 0, `share of order lines sent with "split": false (the rest are allocated by the service, split as needed)`)
	var thresholds multiFlag
	fs.Var(&thresholds, "threshold", `a threshold, "metric:expression", e.g. "http_req_duration:p(95)<200ms" (repeatable)`)
	prefix := fs.String("prefix", getenv("LOADTEST_PREFIX"), "name the run's SKUs <prefix>-<n> (a scenario's own prefix wins; with several scenarios, <prefix>-<i>-<n>); default lt-<random> ($LOADTEST_PREFIX)")
	summaryPath := fs.String("summary-json", "", "write stockguard's summary as JSON to this file (flat figures, the audit, the timeline)")
	exportPath := fs.String("summary-export", "", "write the summary in k6's --summary-export shape to this file (stockguard's summary under \"stockguard\")")
	version := fs.Bool("version", false, "print the version and exit")
	chartPath := fs.String("chart", "", "write throughput and latency over time as a self-contained HTML chart to this file")
	ceiling := fs.String("ceiling", "", "GET this path (e.g. /healthz) in every VU's loop instead of orders: no seeding, no orders, no audit; 2xx answers count as orders_accepted")
	quiet := fs.Bool("quiet", false, "no live progress line")
	auditEvents := fs.Bool("audit-events", false, "the audit also reads the stock events' feed (GET /v1/events) and checks that the events tell every run SKU's counters, with no gap")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the generator to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version {
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(stdout, versionLine(bi))
		return nil
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}

	var cfg Config
	if *configPath != "" {
		var err error
		if cfg, err = LoadConfig(*configPath); err != nil {
			return err
		}
		if cfg.AdminToken == "" {
			cfg.AdminToken = *token
		}
		if cfg.APIKey == "" {
			cfg.APIKey = *apiKey
		}
	} else {
		mv := *maxVUs
		if mv == 0 {
			mv = *vus
		}
		cfg = Config{BaseURL: *url, AdminToken: *token, APIKey: *apiKey, Thresholds: map[string][]string{},
			Scenarios: map[string]Scenario{"default": {Executor: *executor, VUs: *vus, Duration: Duration(*duration),
				Rate: *rateFlag, PreAllocatedVUs: *vus, MaxVUs: mv, Stages: []Stage{{Duration: Duration(*duration), Target: rampTarget(*executor, *vus, *rateFlag)}},
				Workload: Workload{SKUs: *skus, Popularity: *popularity, Stock: *stock, MaxQuantity: *maxQty,
					MultiSKU: *multi, Retry: *retry, AbandonFirst: *abandon, Cancel: *cancelShare,
					Locations: *locations, Named: *named, Unsplit: *unsplit}}}}
		for _, t := range thresholds {
			metric, expr, ok := strings.Cut(t, ":")
			if !ok {
				return fmt.Errorf("%w: %q is not metric:expression", ErrThreshold, t)
			}
			cfg.Thresholds[metric] = append(cfg.Thresholds[metric], expr)
		}
	}
	if *ceiling != "" {
		cfg.Ceiling = *ceiling
	}
	if *auditEvents {
		cfg.AuditEvents = true
	}
	runID := randomKey()[:8]
	assignPrefixes(cfg.Scenarios, *prefix, runID)
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, nil))

	sum, err := Run(ctx, cfg, progressWriter(stderr, *quiet))
	if err != nil {
		return err
	}
	sum.WriteText(stdout)
	if *summaryPath != "" {
		if err := sum.WriteJSON(*summaryPath); err != nil {
			return err
		}
	}
	if *exportPath != "" {
		if err := sum.WriteExport(*exportPath); err != nil {
			return err
		}
	}
	if *chartPath != "" {
		if err := sum.WriteChart(*chartPath, "stockguard load test "+runID); err != nil {
			return err
		}
	}
	if sum.Audit.failed() {
		h := sum.Audit.Holds
		return fmt.Errorf("%w: %d units sold twice, %d lost, %d oversold, %d problems", errAudit,
			h.UnitsSoldTwice, h.UnitsLost, sum.Audit.Oversold, len(h.Problems)+len(sum.Audit.Mismatches))
	}
	for _, v := range sum.Verdicts {
		if !v.Pass {
			return errThresholds
		}
	}
	return nil
}

// assignPrefixes names the SKUs of the scenarios without a prefix of their own:
// prefix (lt-<runID> when empty), and <prefix>-<i> for each of several such
// scenarios, in the order of their names, so that they do not share stock.
func assignPrefixes(scenarios map[string]Scenario, prefix, runID string) {
	var names []string
	for name, s := range scenarios {
		if s.Workload.Prefix == "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if prefix == "" {
		prefix = "lt-" + runID
	}
	for i, name := range names {
		s := scenarios[name]
		s.Workload.Prefix = prefix // scenario names may not fit a SKU
		if len(names) > 1 {
			s.Workload.Prefix += "-" + strconv.Itoa(i)
		}
		scenarios[name] = s
	}
}

// rampTarget is what a ramp given by flags reaches: -rate for an arrival rate,
// -vus for VUs.
func rampTarget(executor string, vus, rate int) int {
	if executor == RampingArrivalRate {
		return rate
	}
	return vus
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// progressWriter is where the live line goes: stderr when it is a terminal.
func progressWriter(stderr io.Writer, quiet bool) io.Writer {
	if f, ok := stderr.(*os.File); ok && !quiet && term.IsTerminal(int(f.Fd())) {
		return stderr
	}
	return nil
}

// Run seeds, runs every scenario at once, audits and judges.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Summary, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lv := &live{}
	rec := newRecorder()
	c := newClient(cfg.BaseURL, cfg.AdminToken, cfg.APIKey, time.Duration(cfg.Timeout), lv, rec) //nolint:contextcheck // its dialer is bounded by each request's deadline
	ceiling := cfg.Ceiling != ""
	var sd seeded
	if !ceiling {
		var err error
		if sd, err = setup(ctx, c, cfg); err != nil {
			return nil, err
		}
	}
	var longest time.Duration
	for _, s := range cfg.Scenarios {
		longest = max(longest, s.total())
	}
	start := time.Now()
	rec.start = start
	stop := showProgress(progress, lv, start, longest)
	stopVUs := sampleVUs(lv, start, longest)
	var mu sync.Mutex
	var all []*vuStats
	var wg sync.WaitGroup
	checkout := false
	for _, s := range cfg.Scenarios {
		arrival := s.Executor == ConstantArrivalRate || s.Executor == RampingArrivalRate
		iterate := ceilingIterate(c, cfg.Ceiling, arrival)
		if !ceiling {
			checkout = checkout || s.Workload.Checkout != nil
			iterate = newWorker(c, s.Workload, arrival).iterate
		}
		wg.Go(func() {
			stats := runScenario(ctx, s, lv, rec.newVU, iterate)
			mu.Lock()
			all = append(all, stats...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stop()
	vus := stopVUs()
	if ceiling {
		sum := summarize(elapsed, all, lv, rec, nil)
		sum.Started, sum.VUs = start, vus
		sum.Ceiling = cfg.Ceiling
		sum.judge(cfg)
		return sum, nil
	}
	sold := map[string]int64{}
	for _, v := range all {
		for sku, n := range v.soldUnits {
			sold[sku] += n
		}
	}
	// Teardown is not cut short by an interrupt: a run without its audit proves
	// nothing. Only the wait for holds to expire is.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	unsettled := settle(actx, c, all, sold)
	var hr *holdRun
	if checkout {
		hr = settleHolds(actx, c, all)
		waitForHolds(ctx, log, hr)
		// The reads: a minute, and a millisecond a hold (32 at a time).
		var rcancel context.CancelFunc
		actx, rcancel = context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second+time.Duration(len(hr.holds))*time.Millisecond)
		defer rcancel()
	}
	audit := teardown(actx, c, sd, sold, unsettled, hr, cfg.AuditEvents)
	if audit.failed() {
		log.Error("the checkout audit failed", "sold_twice", audit.Holds.UnitsSoldTwice, "lost", audit.Holds.UnitsLost,
			"oversold", audit.Oversold, "problems", len(audit.Holds.Problems), "mismatches", len(audit.Mismatches))
	}
	sum := summarize(elapsed, all, lv, rec, &audit)
	sum.Started, sum.VUs = start, vus
	sum.judge(cfg)
	return sum, nil
}

// showProgress prints one live line a second until stopped.
func showProgress(w io.Writer, lv *live, start time.Time, total time.Duration) func() {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var lastReqs int64
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
			}
			reqs, failed := lv.reqs.Load(), lv.failed.Load()
			fmt.Fprintf(w, "\r\033[Krunning %s/%s  VUs %d  %d req/s  errors %.2f%%  dropped %d",
				time.Since(start).Round(time.Second), total, lv.vus.Load(), reqs-lastReqs,
				100*ratio(failed, reqs), lv.dropped.Load())
			lastReqs = reqs
		}
	}()
	return func() { close(done); <-finished }
}

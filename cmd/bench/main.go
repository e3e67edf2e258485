// Command bench measures stockguard's strategies side by side, the way it is
// deployed: three replica processes behind a balancer, on the machine's Redis and
// PostgreSQL (fsync on), driven by the load generator. For every strategy,
// workload and VU count it runs the load a few times and keeps the medians; it
// runs pgbench's guarded single-row UPDATE on the same database as the ceiling
// of "the database alone, one order per commit"; and it writes BENCHMARKS.md,
// the results as JSON and PNG charts, with the machine and settings beside them.
//
//	go run ./cmd/bench                 # the quick profile (make bench)
//	go run ./cmd/bench -profile full   # longer runs, more repeats
//	go run ./cmd/bench -holds only     # holds and the sweeper alone: their section replaced in place
//	go run ./cmd/bench -locks only     # the lock services alone: their section replaced in place
//	go run ./cmd/bench -events only    # the stock events alone: their section replaced in place
//	go run ./cmd/bench -auth only      # authentication and rate limits against none: their section replaced in place
//	go run ./cmd/bench -locations only # stock in three locations against one: its section replaced in place
//	go run ./cmd/bench -soak only      # the soak alone, to 1,000,000 orders, then the checkout soak: its section replaced in place
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Workload is one kind of load, as load generator flags.
type Workload struct {
	Name       string  `json:"name"`
	Title      string  `json:"title"`
	SKUs       int     `json:"skus"`
	Popularity string  `json:"popularity"`
	Multi      float64 `json:"multi"`
	Stock      int     `json:"stock"`
}

// The workloads of the issue: one hot SKU, 100 SKUs with zipf popularity, and
// orders of two to three SKUs. Stock is ample: throughput is measured while there
// is stock to sell; the sell-out run below checks overselling.
var workloads = []Workload{
	{Name: "hot", Title: "one hot SKU", SKUs: 1, Popularity: "uniform", Stock: 100_000_000},
	{Name: "zipf", Title: "100 SKUs, zipf", SKUs: 100, Popularity: "zipf", Stock: 10_000_000},
	{Name: "multi", Title: "multi-SKU orders (2-3 of 100 SKUs)", SKUs: 100, Popularity: "uniform", Multi: 1, Stock: 10_000_000},
}

// sellout sells a hot SKU out at the highest VU count: the audit must find no
// unit oversold, except with unsafe.
var sellout = Workload{Name: "sellout", Title: "sell-out of 300 units", SKUs: 1, Popularity: "uniform", Stock: 300}

// Profile is how long and how often each point is measured.
type Profile struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
	Repeats  int           `json:"repeats"`
	VUs      []int         `json:"vus"`
	PgBench  time.Duration `json:"pgbench_duration_ns"`
	// The sweeper's run: how many holds expire at once, and how long orders are
	// measured before they do.
	SweepHolds  int           `json:"sweep_holds"`
	SweepBefore time.Duration `json:"sweep_before_ns"`
	// The lock services' runs: how long and how often each is measured.
	LocksDuration time.Duration `json:"locks_duration_ns"`
	LocksRepeats  int           `json:"locks_repeats"`
	// SoakHolds are the holds the checkout soak places: the 1,000,000
	// take longer than the quick profile's quarter of an hour on a 2-core machine.
	SoakHolds int64 `json:"soak_holds,omitempty"`
}

var profiles = map[string]Profile{
	"quick": {Name: "quick", Duration: 2 * time.Second, Repeats: 4, VUs: []int{16, 64, 256}, PgBench: 5 * time.Second,
		SweepHolds: 100_000, SweepBefore: 5 * time.Second, LocksDuration: 2 * time.Second, LocksRepeats: 3,
		SoakHolds: 200_000},
	"full": {Name: "full", Duration: 10 * time.Second, Repeats: 6, VUs: []int{16, 64, 256}, PgBench: 15 * time.Second,
		SweepHolds: 100_000, SweepBefore: 10 * time.Second, LocksDuration: 10 * time.Second, LocksRepeats: 5,
		SoakHolds: checkoutFullHolds},
}

type options struct {
	profile      Profile
	strategies   []orders.Strategy
	workloads    []Workload
	replicas     int
	databaseURL  string
	redisURL     string
	out          string
	markdown     string
	holds        string // on, off or only
	holdsVUs     int
	locks        string // on, off or only
	locksVUs     int
	events       string // on, off or only
	eventsVUs    int
	auth         string // on, off or only
	authVUs      int
	locations    string // on, off or only
	locationsVUs int
	requireReal  bool   // STOCKGUARD_TEST_REQUIRE_REAL=1: no lock service skipped for want of a redis-server
	soak         string // on, off or only
	soakOrders   int64
	soakStep     int64
	soakVUs      int
	soakHolds    int64         // the checkout soak's holds; 0: no checkout soak
	cpuProfile   time.Duration // 0: no CPU profile
	command      string        // as typed, for the report
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	f := defineFlags(fs, &o, getenv)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *f.render != "" {
		return rerender(*f.render, o, stdout)
	}
	if err := f.apply(&o, args, getenv); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.soak == "only" && !o.only() {
		return runSoak(ctx, o, log, stdout)
	}
	res, err := measure(ctx, o, log)
	if err != nil {
		return err
	}
	if o.only() {
		if err := res.writeSectionsOnly(o, stdout); err != nil {
			return err
		}
		if o.soak == "only" {
			return runSoak(ctx, o, log, stdout)
		}
		return nil
	}
	if err := res.write(o); err != nil {
		return err
	}
	res.printSummary(stdout)
	fmt.Fprintf(stdout, "\nwrote %s, %s/results.json and the charts in %s/\n", o.markdown, o.out, o.out)
	return soakAfterReport(ctx, o, log, stdout)
}

// benchFlags are the flags that do not land in an options field as they are:
// apply checks them and turns them into options.
type benchFlags struct {
	profile, strategies, names, vus, render *string
	duration                                *time.Duration
	repeats, sweepHolds                     *int
}

// defineFlags defines the command's flags on fs: into o those kept as
// given, into the benchFlags returned the others.
func defineFlags(fs *flag.FlagSet, o *options, getenv func(string) string) benchFlags {
	var f benchFlags
	f.profile = fs.String("profile", "quick", "quick or full: quick's strategies take under 10 minutes, and each section after them adds its own "+
		"(the stock events about 3, the soaks the most)")
	f.strategies = fs.String("strategies", joinStrategies(orders.Strategies), "strategies to measure, comma-separated")
	f.names = fs.String("workloads", "hot,zipf,multi", "workloads to run, comma-separated: hot, zipf, multi")
	f.vus = fs.String("vus", "", "VU counts, comma-separated (default: the profile's)")
	f.duration = fs.Duration("duration", 0, "length of each run (default: the profile's)")
	f.repeats = fs.Int("repeats", 0, "rounds: the strategies are measured in turn, in ABBA order, this many times; each point keeps its median (default: the profile's)")
	fs.IntVar(&o.replicas, "replicas", 3, "replica processes behind the balancer")
	fs.StringVar(&o.databaseURL, "database-url", envOr(getenv, "STOCKGUARD_BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/stockguard_bench?sslmode=disable"),
		"PostgreSQL database to run on; created if missing, emptied before each strategy ($STOCKGUARD_BENCH_DATABASE_URL)")
	fs.StringVar(&o.redisURL, "redis-url", envOr(getenv, "STOCKGUARD_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis to run on; each strategy gets its own namespace, deleted after ($STOCKGUARD_BENCH_REDIS_URL)")
	fs.StringVar(&o.out, "out", "benchmarks", "folder for results.json and the charts")
	fs.StringVar(&o.markdown, "markdown", "BENCHMARKS.md", "the report to write")
	fs.StringVar(&o.holds, "holds", "on", "the holds benchmark on the default strategy: on, off, or only (nothing else measured; "+
		"its section of the report and its chart replaced in place)")
	fs.IntVar(&o.holdsVUs, "holds-vus", 64, "VUs of the holds benchmark")
	fs.StringVar(&o.locks, "locks", "on", "the lock services benchmark (redis, redlock, postgres, etcd, zk, azblob) on the default strategy: on, off, or only "+
		"(nothing else measured; its section of the report, locks.json and locks.png replaced in place)")
	fs.IntVar(&o.locksVUs, "locks-vus", 64, "VUs of the lock services benchmark")
	fs.StringVar(&o.events, "events", "on", "the stock events benchmark on the default strategy (events off against on with a private NATS JetStream, "+
		"ABBA; then NATS stopped for 10s under load and the catch-up timed): on, off, or only (nothing else measured; its section of the report, "+
		"events.json and events.png replaced in place)")
	fs.IntVar(&o.eventsVUs, "events-vus", 64, "VUs of the stock events benchmark")
	fs.StringVar(&o.auth, "auth", "on", "the authentication benchmark on the default strategy (replicas with --insecure-no-auth against every order "+
		"authenticated and rate limited with a client's API key, ABBA, on hot and zipf): on, off, or only (nothing else measured; its section of the report, "+
		"auth.json and auth.png replaced in place)")
	fs.IntVar(&o.authVUs, "auth-vus", 64, "VUs of the authentication benchmark")
	fs.StringVar(&o.locations, "locations", "on", "the locations benchmark on the default strategy (orders on SKUs stocked in three locations, "+
		"lines allocated and some split, against one location, ABBA, on hot and zipf; then a sell-out in three locations): on, off, or only "+
		"(nothing else measured; its section of the report, locations.json and locations.png replaced in place)")
	fs.IntVar(&o.locationsVUs, "locations-vus", 64, "VUs of the locations benchmark")
	fs.StringVar(&o.soak, "soak", "on", "the soak on the default strategy, hot and zipf alternating until the database holds -soak-orders orders, "+
		"then the checkout soak to -soak-holds holds, never analysed: on, off (its section kept from the last soak.json), or only (nothing else measured; its section, soak.json and soak.png replaced in place)")
	fs.Int64Var(&o.soakOrders, "soak-orders", 1_000_000, "orders in the database at the soak's end")
	fs.Int64Var(&o.soakStep, "soak-step", 100_000, "the soak's step: orders/s and p99 per this many orders, and holds/s per this many holds in the checkout soak")
	fs.IntVar(&o.soakVUs, "soak-vus", 64, "VUs of the soak")
	fs.Int64Var(&o.soakHolds, "soak-holds", -1, "holds the checkout soak places, after the orders' soak, on emptied tables; its first and last -soak-step holds "+
		"are compared (-1: the profile's, quick 200,000, full 1,000,000; 0: no checkout soak)")
	fs.DurationVar(&o.cpuProfile, "cpu-profile", 10*time.Second, fmt.Sprintf("the CPU profile of one replica of the default strategy under the hot SKU at %d VUs, "+
		"in a run of its own after the points of its first round, written to the -out folder with its top 20; 0 turns it off", profileVUs))
	f.sweepHolds = fs.Int("sweep-holds", 0, "holds expiring at once in the sweeper's run (default: the profile's)")
	f.render = fs.String("render", "", "measure nothing: write the report and charts again from this results.json "+
		"(or the Holds section and chart from a holds.json, the Lock services section and chart from a locks.json, the Stock events section and chart from an events.json, "+
		"the Authentication section and chart from an auth.json, the Stock in several locations section and chart from a locations.json, "+
		"the Soak section and chart from a soak.json)")
	return f
}

// apply completes o from the flags: the profile with the overrides, the
// sections' settings checked, the VU counts, strategies and workloads parsed.
func (f benchFlags) apply(o *options, args []string, getenv func(string) string) error {
	p, ok := profiles[*f.profile]
	if !ok {
		return fmt.Errorf("profile %q (want quick or full)", *f.profile)
	}
	if *f.duration > 0 {
		p.Duration, p.LocksDuration = *f.duration, *f.duration
	}
	if *f.repeats > 0 {
		p.Repeats, p.LocksRepeats = *f.repeats, *f.repeats
	}
	if *f.sweepHolds > 0 {
		p.SweepHolds = *f.sweepHolds
	}
	if o.soakHolds < 0 {
		o.soakHolds = p.SoakHolds
	}
	if err := o.checkSections(); err != nil {
		return err
	}
	o.requireReal = getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1"
	o.command = strings.TrimSpace("go run ./cmd/bench " + strings.Join(args, " "))
	if *f.vus != "" {
		vus, err := parseVUs(*f.vus)
		if err != nil {
			return err
		}
		p.VUs = vus
	}
	o.profile = p
	for _, s := range strings.Split(*f.strategies, ",") {
		st := orders.Strategy(strings.TrimSpace(s))
		if !st.Valid() {
			return fmt.Errorf("unknown strategy %q", s)
		}
		o.strategies = append(o.strategies, st)
	}
	for _, n := range strings.Split(*f.names, ",") {
		i := slices.IndexFunc(workloads, func(w Workload) bool { return w.Name == strings.TrimSpace(n) })
		if i < 0 {
			return fmt.Errorf("unknown workload %q", n)
		}
		o.workloads = append(o.workloads, workloads[i])
	}
	return nil
}

// checkSections checks the sections' settings: each on, off or only, and
// their VUs, orders, holds and step positive.
func (o options) checkSections() error {
	if o.holds != "on" && o.holds != "off" && o.holds != "only" {
		return fmt.Errorf("holds: %q (want on, off or only)", o.holds)
	}
	if o.holdsVUs < 1 {
		return fmt.Errorf("holds-vus: %d is not a positive number", o.holdsVUs)
	}
	if o.locks != "on" && o.locks != "off" && o.locks != "only" {
		return fmt.Errorf("locks: %q (want on, off or only)", o.locks)
	}
	if o.locksVUs < 1 {
		return fmt.Errorf("locks-vus: %d is not a positive number", o.locksVUs)
	}
	if o.events != "on" && o.events != "off" && o.events != "only" {
		return fmt.Errorf("events: %q (want on, off or only)", o.events)
	}
	if o.eventsVUs < 1 {
		return fmt.Errorf("events-vus: %d is not a positive number", o.eventsVUs)
	}
	if o.auth != "on" && o.auth != "off" && o.auth != "only" {
		return fmt.Errorf("auth: %q (want on, off or only)", o.auth)
	}
	if o.authVUs < 1 {
		return fmt.Errorf("auth-vus: %d is not a positive number", o.authVUs)
	}
	if o.locations != "on" && o.locations != "off" && o.locations != "only" {
		return fmt.Errorf("locations: %q (want on, off or only)", o.locations)
	}
	if o.locationsVUs < 1 {
		return fmt.Errorf("locations-vus: %d is not a positive number", o.locationsVUs)
	}
	if o.soak != "on" && o.soak != "off" && o.soak != "only" {
		return fmt.Errorf("soak: %q (want on, off or only)", o.soak)
	}
	if o.soakOrders < 1 || o.soakStep < 1 || o.soakStep > o.soakOrders || o.soakVUs < 1 || (o.soakHolds > 0 && o.soakStep > o.soakHolds) {
		return fmt.Errorf("soak: orders %d, holds %d, step %d, VUs %d: want positive numbers, the step no more than the orders or the holds",
			o.soakOrders, o.soakHolds, o.soakStep, o.soakVUs)
	}
	return nil
}

// parseVUs parses -vus: positive counts, comma-separated.
func parseVUs(list string) ([]int, error) {
	var vus []int
	for _, v := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("vus: %q is not a positive number", v)
		}
		vus = append(vus, n)
	}
	return vus, nil
}

// writeSectionsOnly writes, of a run of sections alone (-holds only and the
// like), each measured section into the report in place with its files, and
// prints its summary.
func (res *Results) writeSectionsOnly(o options, stdout io.Writer) error {
	if res.Holds != nil {
		if err := res.Holds.writeOnly(o); err != nil {
			return err
		}
		res.Holds.printSummary(stdout)
		fmt.Fprintf(stdout, "\nwrote the Holds section of %s, %s/holds.json and %s/holds.png\n", o.markdown, o.out, o.out)
	}
	if res.Locks != nil {
		if err := res.Locks.writeOnly(o); err != nil {
			return err
		}
		res.Locks.printSummary(stdout)
		fmt.Fprintf(stdout, "\nwrote the Lock services section of %s, %s/locks.json and %s/locks.png\n", o.markdown, o.out, o.out)
	}
	if res.Events != nil {
		if err := res.Events.writeOnly(o); err != nil {
			return err
		}
		res.Events.printSummary(stdout)
		fmt.Fprintf(stdout, "\nwrote the Stock events section of %s, %s/events.json and %s/events.png\n", o.markdown, o.out, o.out)
	}
	if res.Auth != nil {
		if err := res.Auth.writeOnly(o); err != nil {
			return err
		}
		res.Auth.printSummary(stdout)
		fmt.Fprintf(stdout, "\nwrote the Authentication section of %s, %s/auth.json and %s/auth.png\n", o.markdown, o.out, o.out)
	}
	if res.Locations != nil {
		if err := res.Locations.writeOnly(o); err != nil {
			return err
		}
		res.Locations.printSummary(stdout)
		fmt.Fprintf(stdout, "\nwrote the Stock in several locations section of %s, %s/locations.json and %s/locations.png\n", o.markdown, o.out, o.out)
	}
	return nil
}

// only says whether a section alone is measured (-holds only, -locks only,
// -events only, -auth only, -locations only, or several): then the strategies and the sections left on are not. -soak only is
// not among them: it measures nothing else, and runs beside them when combined.
func (o options) only() bool {
	return o.holds == "only" || o.locks == "only" || o.events == "only" || o.auth == "only" || o.locations == "only"
}

func joinStrategies(ss []orders.Strategy) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

// rerender writes the report and charts of a results.json again, or one
// section's and its chart from its own file (holds.json, locks.json,
// events.json, auth.json, locations.json, soak.json).
func rerender(path string, o options, stdout io.Writer) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if filepath.Base(path) == "soak.json" {
		s, err := readSoak(path)
		if err != nil {
			return err
		}
		if err := s.writeOnly(o); err != nil {
			return err
		}
		s.printSummary(stdout)
		return nil
	}
	if filepath.Base(path) == "locations.json" {
		var l LocationsResults
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := l.writeOnly(o); err != nil {
			return err
		}
		l.printSummary(stdout)
		return nil
	}
	if filepath.Base(path) == "auth.json" {
		var a AuthResults
		if err := json.Unmarshal(b, &a); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := a.writeOnly(o); err != nil {
			return err
		}
		a.printSummary(stdout)
		return nil
	}
	if filepath.Base(path) == "events.json" {
		var e EventsResults
		if err := json.Unmarshal(b, &e); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := e.writeOnly(o); err != nil {
			return err
		}
		e.printSummary(stdout)
		return nil
	}
	if filepath.Base(path) == "locks.json" {
		var l LocksResults
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := l.writeOnly(o); err != nil {
			return err
		}
		l.printSummary(stdout)
		return nil
	}
	if filepath.Base(path) == "holds.json" {
		var h HoldsResults
		if err := json.Unmarshal(b, &h); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := h.writeOnly(o); err != nil {
			return err
		}
		h.printSummary(stdout)
		return nil
	}
	var res Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	o.profile = res.Profile
	for _, w := range workloads {
		if _, ok := res.point(res.strategies()[0], w.Name, res.Profile.VUs[0]); ok {
			o.workloads = append(o.workloads, w)
		}
	}
	if err := res.write(o); err != nil {
		return err
	}
	res.printSummary(stdout)
	return keepSoakSection(o)
}

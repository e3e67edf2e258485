package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The locations benchmark (issue 41), on the default strategy: orders on
// SKUs whose stock is in three locations, every line allocated by the
// service (split where a location is short), against the same orders on
// SKUs in one, the default location alone (a deployment that never made a
// location), the two taking turns in ABBA order on the hot SKU and zipf;
// then a sell-out in three locations with lines named, unsplit and
// allocated.

// The two configurations, in the order of the even rounds.
const (
	locOne   = "one"   // the default location alone: no other exists
	locThree = "three" // the load generator's -locations 3
)

var locationsConfigs = []string{locOne, locThree}

// locationsWorkloads are the workloads the locations are measured on, of
// those -workloads names.
var locationsWorkloads = []string{"hot", "zipf"}

// Issue 41's target: with three locations, orders/s at least this share of
// with one.
const locationsRateTarget = 0.90

// locationsQuantity is the largest quantity of a line in both
// configurations: with three locations the even SKUs (the hot one among
// them) have one unit in the default, which allocation takes first, so that
// the first line of two units to reach it is split.
const locationsQuantity = 2

// benchLocations are the locations the load generator's -locations 3 uses
// beside the default, with the priorities it gives them. The bench makes
// them in the database before the replicas start, as POST /v1/locations
// would (the load generator then finds them made), so that a build without
// that route is measured all the same.
var benchLocations = []struct {
	id       string
	priority int
}{{"loadtest-2", 10}, {"loadtest-3", 20}}

// locationsSellout sells 20 SKUs of 30 units out in three locations, lines of
// one to three units: 30% named, 20% unsplit, the rest allocated, so that
// lines split and locations sell out one by one.
var locationsSellout = Workload{Name: "sellout-locations", Title: "sell-out of 20 SKUs of 30 units in three locations", SKUs: 20,
	Popularity: "uniform", Stock: 30}

// locationsSelloutArgs are the sell-out's load generator flags.
var locationsSelloutArgs = []string{"-max-quantity", "3", "-locations", "3", "-named", "0.3", "-unsplit", "0.2"}

// measureLocations runs the section: the ABBA rounds on each workload, then
// the sell-out.
func measureLocations(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client,
	log *slog.Logger, m Machine) (*LocationsResults, error) {
	res := &LocationsResults{onOff: newOnOff(o, m, o.locationsVUs), Quantity: locationsQuantity}
	wls := sectionWorkloads(o.workloads, locationsWorkloads)
	total := len(wls)*len(locationsConfigs)*res.Repeats + 1
	log.Info("locations: plan", "strategy", orders.DefaultStrategy, "vus", res.VUs, "workloads", len(wls), "configurations", locationsConfigs,
		"runs", total, "run_length", res.Duration)
	done := 0
	if err := abbaRounds(wls, res.Repeats, locationsConfigs, func(w Workload, cfg string, round int) error {
		r, err := locationsContender(ctx, o, bins, db, rdb, log, w, cfg, round, res.VUs)
		if err == nil {
			res.Runs = append(res.Runs, r)
			done++
			log.Info("locations: progress", "runs", fmt.Sprintf("%d/%d", done, total))
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("locations, %w", err)
	}
	sell, err := locationsSelloutRun(ctx, o, bins, db, rdb, log, res.VUs)
	if err != nil {
		return nil, fmt.Errorf("locations, sell-out: %w", err)
	}
	res.Sellout = &sell
	res.Points, res.Costs = locationsPoints(res.Runs, workloads)
	res.LoadAfter = loadAverage()
	return res, nil
}

// setLocations makes the locations of cfg the only ones besides the default:
// the bench's for three, none for one. The tables that refer to locations
// are emptied before (benchTables).
func setLocations(ctx context.Context, db *gorm.DB, cfg string) error {
	if err := db.WithContext(ctx).Exec("DELETE FROM locations WHERE id <> ?", orders.DefaultLocation).Error; err != nil {
		return fmt.Errorf("locations: %w", err)
	}
	if cfg != locThree {
		return nil
	}
	for _, l := range benchLocations {
		if err := db.WithContext(ctx).Exec("INSERT INTO locations (id, name, priority, active, created_at) VALUES (?, ?, ?, true, now())",
			l.id, "Bench "+l.id, l.priority).Error; err != nil {
			return fmt.Errorf("location %s: %w", l.id, err)
		}
	}
	return nil
}

// locationsArgs are the load generator's flags of a configuration.
func locationsArgs(cfg string) []string {
	args := []string{"-max-quantity", strconv.Itoa(locationsQuantity)}
	if cfg == locThree {
		args = append(args, "-locations", "3")
	}
	return args
}

// locationsContender runs the workload once on fresh tables and new
// replicas of one configuration: a warm-up, ANALYZE, then the metered run.
func locationsContender(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger,
	w Workload, cfg string, round, vus int) (LocationsRun, error) {
	c, err := startCluster(ctx, o, bins, db, orders.DefaultStrategy, func() error { return setLocations(ctx, db, cfg) }, log)
	if err != nil {
		return LocationsRun{}, err
	}
	defer c.stop(ctx, o.redisURL, log)
	extra := locationsArgs(cfg)
	meter, err := warmUp(ctx, bins, c, rdb, db, w, vus, extra...)
	if err != nil {
		return LocationsRun{}, err
	}
	r, err := meteredRun(ctx, meter, bins.Loadtest, c.lb.URL, rdb, db, w, vus, o.profile.Duration, extra...)
	if err != nil {
		return LocationsRun{}, err
	}
	r.Strategy, r.Round = string(orders.DefaultStrategy), round
	log.Info("locations: run", "workload", w.Name, "locations", cfg, "round", round+1, "orders/s", int(r.OrdersPerSec), "p99_ms", r.P99,
		"cpu_us_per_order", int(1e6*r.CPUPerOrder()), "lines_split", r.Split, "failed", r.FailedRatio, "oversold", r.Oversold,
		"consistent", r.Consistent)
	return LocationsRun{Config: cfg, Round: round + 1, Run: r}, nil
}

// locationsSelloutRun sells locationsSellout out in three locations, once.
func locationsSelloutRun(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger,
	vus int) (Run, error) {
	c, err := startCluster(ctx, o, bins, db, orders.DefaultStrategy, func() error { return setLocations(ctx, db, locThree) }, log)
	if err != nil {
		return Run{}, err
	}
	defer c.stop(ctx, o.redisURL, log)
	r, err := loadRun(ctx, bins.Loadtest, c.lb.URL, rdb, db, locationsSellout, vus, o.profile.Duration, locationsSelloutArgs...)
	if err != nil {
		return Run{}, err
	}
	r.Strategy = string(orders.DefaultStrategy)
	log.Info("locations: sell-out", "sold", r.Accepted, "refused", r.Refused, "lines_split", r.Split, "oversold", r.Oversold,
		"consistent", r.Consistent)
	return r, nil
}

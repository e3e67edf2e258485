package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The authentication benchmark (issue 39), on the default strategy: what it
// costs that every order is authenticated (a client's API key looked up) and
// rate limited (its tokens leased from the shared bucket in Redis), against
// replicas that check nothing (--insecure-no-auth), the two taking turns in
// ABBA order.

// The two configurations, in the order of the even rounds.
const (
	authOff = "off" // --insecure-no-auth: every request is the admin's, unchecked
	authOn  = "on"  // every order with the bench client's key, authenticated and rate limited
)

var authConfigs = []string{authOff, authOn}

// authWorkloads are the workloads the checks are measured on, of those
// -workloads names.
var authWorkloads = []string{"hot", "zipf"}

// Issue 39's targets: with the checks, orders/s at least this share of
// without, and the replicas' CPU per order at most this multiple.
const (
	authRateTarget = 0.90
	authCPUTarget  = 1.10
)

// requestsMetric is each replica's count of its answers by route, method and
// status.
const requestsMetric = "stockguard_http_requests_total"

// measureAuth runs the section: the ABBA rounds on each workload.
func measureAuth(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client,
	log *slog.Logger, m Machine) (*AuthResults, error) {
	res := &AuthResults{onOff: newOnOff(o, m, o.authVUs), RatePerSecond: benchClientRate, Burst: benchClientRate}
	wls := sectionWorkloads(o.workloads, authWorkloads)
	log.Info("auth: plan", "strategy", orders.DefaultStrategy, "vus", res.VUs, "workloads", len(wls), "configurations", authConfigs,
		"runs", len(wls)*len(authConfigs)*res.Repeats, "run_length", res.Duration)
	if err := abbaRounds(wls, res.Repeats, authConfigs, func(w Workload, cfg string, round int) error {
		r, err := authContender(ctx, o, bins, db, rdb, log, w, cfg, round, res.VUs)
		if err == nil {
			res.Runs = append(res.Runs, r)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("auth, %w", err)
	}
	res.Points, res.Costs = authPoints(res.Runs, workloads)
	res.LoadAfter = loadAverage()
	return res, nil
}

// authContender runs the workload once on fresh tables and new replicas of
// one configuration: a warm-up, ANALYZE, then the metered run; with the checks
// on, the warm-up and the run send a key of a client of their own, made with
// the admin token (whose requests are never rate limited) once the replicas
// are up.
func authContender(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger,
	w Workload, cfg string, round, vus int) (AuthRun, error) {
	c, err := startCluster(ctx, o, bins, db, orders.DefaultStrategy, nil, log,
		"STOCKGUARD_INSECURE_NO_AUTH="+strconv.FormatBool(cfg == authOff))
	if err != nil {
		return AuthRun{}, err
	}
	defer c.stop(ctx, o.redisURL, log)
	var extra []string // off: no -api-key, the load generator sends the admin token, which nothing reads
	if cfg == authOn {
		d, err := newDriver(ctx, c.lb.URL, 1, log) // the bench client: limits far above the load
		if err != nil {
			return AuthRun{}, err
		}
		d.close()
		extra = []string{"-api-key", d.key}
	}
	meter, err := warmUp(ctx, bins, c, rdb, db, w, vus, extra...)
	if err != nil {
		return AuthRun{}, err
	}
	r, err := meteredRun(ctx, meter, bins.Loadtest, c.lb.URL, rdb, db, w, vus, o.profile.Duration, extra...)
	if err != nil {
		return AuthRun{}, err
	}
	r.Strategy, r.Round = string(orders.DefaultStrategy), round
	ar := AuthRun{Config: cfg, Round: round + 1, Run: r}
	// The replicas are new: their counts are the warm-up's and the run's.
	if ar.Limited, err = clusterStatus(ctx, c.urls, "429"); err != nil {
		return AuthRun{}, err
	}
	log.Info("auth: run", "workload", w.Name, "auth", cfg, "round", round+1, "orders/s", int(r.OrdersPerSec), "p99_ms", r.P99,
		"replica_cpu_us_per_order", int(1e6*r.CPU.Replicas/float64(max(r.Accepted, 1))), "cpu_us_per_order", int(1e6*r.CPUPerOrder()),
		"http_429", ar.Limited, "failed", r.FailedRatio, "oversold", r.Oversold, "consistent", r.Consistent)
	return ar, nil
}

// clusterStatus sums the replicas' answers of one status, every route.
func clusterStatus(ctx context.Context, urls []string, status string) (int64, error) {
	var sum int64
	for _, u := range urls {
		var n int64
		err := scrapeMetrics(ctx, u, func(r io.Reader) (err error) {
			n, err = parseStatusCount(r, status)
			return err
		})
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// parseStatusCount sums requestsMetric's samples of one status from
// Prometheus's text format (0 when the replica gave none).
func parseStatusCount(r io.Reader, status string) (int64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) <= len(requestsMetric) || line[:len(requestsMetric)+1] != requestsMetric+"{" {
			continue
		}
		_, labels, v, err := sampleLine(line)
		if err != nil {
			return 0, err
		}
		if labels["status"] == status {
			sum += v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	return int64(sum), nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// What the sections that weigh a feature on against off on the default
// strategy (the stock events, the authentication checks) share: the head of
// their results, the rounds in ABBA order, the warm-up before each metered
// run, the pooling of a configuration's runs and the rounds' pairs.

// onOff is how an on-against-off section (events, authentication) was run,
// the head of its results: the command, the commit, the strategy, the load,
// and the machine's cores and its one-minute load average before and after
// the section (other work on a shared machine shows there).
type onOff struct {
	Command    string        `json:"command"`
	When       string        `json:"when"`
	Commit     string        `json:"commit"`
	Strategy   string        `json:"strategy"`
	Replicas   int           `json:"replicas"`
	VUs        int           `json:"vus"`
	Repeats    int           `json:"repeats"`
	Duration   time.Duration `json:"duration_ns"`
	Warmup     time.Duration `json:"warmup_ns"`
	Cores      int           `json:"cores"`
	LoadBefore float64       `json:"load_before"`
	LoadAfter  float64       `json:"load_after"`
}

// newOnOff is the head of an on-against-off section measured now on the
// default strategy at vus.
func newOnOff(o options, m Machine, vus int) onOff {
	return onOff{Command: o.command, When: m.When, Commit: m.Commit, Strategy: string(orders.DefaultStrategy), Replicas: o.replicas,
		VUs: vus, Repeats: o.profile.Repeats, Duration: o.profile.Duration, Warmup: lockWarmup, Cores: m.Cores, LoadBefore: loadAverage()}
}

// sectionWorkloads are those of wls (the -workloads) whose names are among
// names, in wls' order.
func sectionWorkloads(wls []Workload, names []string) []Workload {
	var out []Workload
	for _, w := range wls {
		if slices.Contains(names, w.Name) {
			out = append(out, w)
		}
	}
	return out
}

// abbaRounds runs repeats rounds of configs on each workload: in the order
// given in the even rounds, reversed in the odd ones, so that a drift of the
// machine during the section falls on every configuration alike. round is
// 0-based.
func abbaRounds(wls []Workload, repeats int, configs []string, run func(w Workload, cfg string, round int) error) error {
	for _, w := range wls {
		for round := range repeats {
			order := slices.Clone(configs)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, cfg := range order {
				if err := run(w, cfg, round); err != nil {
					return fmt.Errorf("%s, %s: %w", w.Name, cfg, err)
				}
			}
		}
	}
	return nil
}

// warmUp runs the workload for lockWarmup on the new cluster c, then ANALYZE
// (an emptied table is planned as empty until told otherwise), and returns
// the meter of its replicas. extra are the load generator's flags of the
// configuration (its credential), for the warm-up as for the run after it.
func warmUp(ctx context.Context, bins topology.Binaries, c *cluster, rdb *redis.Client, db *gorm.DB, w Workload, vus int,
	extra ...string) (cpuMeter, error) {
	if _, err := loadRun(ctx, bins.Loadtest, c.lb.URL, rdb, db, w, vus, lockWarmup, extra...); err != nil {
		return cpuMeter{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return cpuMeter{}, fmt.Errorf("analyze: %w", err)
	}
	pids := make([]int, len(c.procs))
	for i, p := range c.procs {
		pids[i] = p.Process.Pid
	}
	return newCPUMeter(ctx, rdb, pids), nil
}

// pooled is a configuration's runs on one workload taken together.
type pooled struct {
	// The medians of the runs' orders/s, p99 and failed share.
	OrdersPerSec, P99, FailedRatio float64
	// Rate is the orders of every run over their seconds: the runs pooled.
	Rate       float64
	Oversold   int64 // the highest of the runs
	Consistent bool  // every run's audit
	// CPU is the CPU seconds per accepted order over every run: the sum of
	// their CPU over the sum of their orders, by part.
	CPU CPU
}

// pool takes runs together; false when there are none.
func pool(rs []Run) (pooled, bool) {
	if len(rs) == 0 {
		return pooled{}, false
	}
	pick := func(f func(Run) float64) float64 {
		xs := make([]float64, len(rs))
		for i, x := range rs {
			xs[i] = f(x)
		}
		return median(xs)
	}
	p := pooled{Consistent: true,
		OrdersPerSec: pick(func(x Run) float64 { return x.OrdersPerSec }),
		P99:          pick(func(x Run) float64 { return x.P99 }),
		FailedRatio:  pick(func(x Run) float64 { return x.FailedRatio })}
	var cpu CPU
	var accepted int64
	var secs float64
	for _, x := range rs {
		cpu, accepted, secs = cpu.add(x.CPU), accepted+x.Accepted, secs+x.Seconds
		p.Oversold = max(p.Oversold, x.Oversold)
		p.Consistent = p.Consistent && x.Consistent
	}
	p.CPU = cpu.div(float64(max(accepted, 1)))
	p.Rate = float64(accepted) / max(secs, 1e-9)
	return p, true
}

// roundPairs are each round's runs of configurations a and b on workload w,
// in the rounds' order, of the rounds that have both; of reads a section's
// run.
func roundPairs[R any](runs []R, w, a, b string, of func(R) (cfg string, round int, r Run)) [][2]Run {
	byRound := map[int]map[string]Run{}
	for _, x := range runs {
		cfg, round, r := of(x)
		if r.Workload != w || (cfg != a && cfg != b) {
			continue
		}
		if byRound[round] == nil {
			byRound[round] = map[string]Run{}
		}
		byRound[round][cfg] = r
	}
	var rounds []int
	for round, m := range byRound {
		if _, ok := m[a]; ok {
			if _, ok := m[b]; ok {
				rounds = append(rounds, round)
			}
		}
	}
	slices.Sort(rounds)
	pairs := make([][2]Run, len(rounds))
	for i, round := range rounds {
		pairs[i] = [2]Run{byRound[round][a], byRound[round][b]}
	}
	return pairs
}

// pairRatios are f(b) ÷ f(a) of each pair whose runs both accepted orders.
func pairRatios(pairs [][2]Run, f func(Run) float64) []float64 {
	var out []float64
	for _, p := range pairs {
		if p[0].Accepted > 0 && p[1].Accepted > 0 {
			out = append(out, f(p[1])/max(f(p[0]), 1e-12))
		}
	}
	return out
}

// spreadNote warns, for a workload's rounds' ratios rs, when the highest is
// more than wider times the lowest: other work on the machine then moved the
// runs by more than the target can tell.
func spreadNote(w io.Writer, title string, rs []float64, wider float64) {
	if len(rs) < 2 || slices.Min(rs) <= 0 || slices.Max(rs)/slices.Min(rs) <= wider {
		return
	}
	fmt.Fprintf(w, "\n**%s: the rounds' ratios range from %.2f to %.2f**, wider than the 10%% the target asks to tell: other work on the machine moved each run's figures (the default strategy's batches shrink when it is slowed, which moves its orders/s and its CPU per order, and PostgreSQL's CPU is the whole server's), so the pooled ratio is uncertain by about as much. Longer runs (`-duration`, `-repeats`) on a quiet machine narrow it.\n",
		title, slices.Min(rs), slices.Max(rs))
}

// scrapeMetrics reads the /metrics of the replica at base (admin only) with
// parse.
func scrapeMetrics(ctx context.Context, base string, parse func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("metrics: %s", resp.Status)
	}
	return parse(resp.Body)
}

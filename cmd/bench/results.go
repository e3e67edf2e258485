package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// Results are everything one benchmark measured.
type Results struct {
	Machine  Machine   `json:"machine"`
	Profile  Profile   `json:"profile"`
	Replicas int       `json:"replicas"`
	Default  string    `json:"default_strategy"`
	PgBench  []float64 `json:"pgbench_tps"`
	Runs     []Run     `json:"runs"`
	// CeilingRuns are the load generator on the trivial endpoint, through the
	// same balancer and replicas, one per VU count and round.
	CeilingRuns []Run            `json:"ceiling_runs"`
	Ceiling     []Ceiling        `json:"ceiling"`
	Sellout     map[string]Run   `json:"sellout"`
	RSS         map[string]int64 `json:"peak_rss_bytes"`
	// Memory is, per strategy, the highest RssAnon a replica reached in a
	// metered run, with its RssFile then.
	Memory map[string]Memory `json:"peak_rss_anon,omitempty"`
	// CPUProfile is the profile of one replica of the default strategy, taken
	// in a run of its own; nil when not asked for.
	CPUProfile *CPUProfile   `json:"cpu_profile,omitempty"`
	Points     []Point       `json:"points"`
	Costs      []Cost        `json:"costs"`
	Targets    []Target      `json:"targets"`
	Holds      *HoldsResults `json:"holds,omitempty"`
	Locks      *LocksResults `json:"locks,omitempty"`
	// Events is the stock events' section (issue 32), when measured.
	Events *EventsResults `json:"events,omitempty"`
	// Auth is the authentication section's (issue 39), when measured.
	Auth *AuthResults `json:"auth,omitempty"`
	// Locations is the section of stock in several locations (issue 41), when measured.
	Locations *LocationsResults `json:"locations,omitempty"`
}

// Point is the medians of the runs of one strategy, workload and VU count.
type Point struct {
	Strategy     string  `json:"strategy"`
	Workload     string  `json:"workload"`
	VUs          int     `json:"vus"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P50          float64 `json:"p50_ms"`
	P95          float64 `json:"p95_ms"`
	P99          float64 `json:"p99_ms"`
	FailedRatio  float64 `json:"http_req_failed"`
	Oversold     int64   `json:"oversold_max"`
	Consistent   bool    `json:"consistent_all"`
	// The spread of the rounds: the lowest and highest orders/s and p99.
	OrdersMin float64 `json:"orders_per_s_min"`
	OrdersMax float64 `json:"orders_per_s_max"`
	P99Min    float64 `json:"p99_ms_min"`
	P99Max    float64 `json:"p99_ms_max"`
	// CPUPerOrder is the order path's CPU seconds per accepted order, median of
	// the rounds.
	CPUPerOrder float64 `json:"cpu_s_per_order"`
}

// Spread is half the range of the rounds' orders/s, as a share of the median.
func (p Point) Spread() float64 {
	return (p.OrdersMax - p.OrdersMin) / 2 / max(p.OrdersPerSec, 1e-9)
}

// Ceiling is the medians of the runs on the trivial endpoint at one VU count.
type Ceiling struct {
	VUs        int     `json:"vus"`
	ReqsPerSec float64 `json:"reqs_per_s"`
	Min        float64 `json:"reqs_per_s_min"`
	Max        float64 `json:"reqs_per_s_max"`
	P99        float64 `json:"p99_ms"`
}

// Cost is what a strategy spends per accepted order on one workload, over all
// its runs there (every VU count and round).
type Cost struct {
	Strategy      string  `json:"strategy"`
	Workload      string  `json:"workload"`
	RedisPerOrder float64 `json:"redis_commands_per_order"`
	// TripsPerOrder are the replicas' round trips to Redis per accepted
	// order, over the runs that measured them (0: none did).
	TripsPerOrder    float64 `json:"redis_round_trips_per_order,omitempty"`
	DBWritesPerOrder float64 `json:"db_write_transactions_per_order"`
	// CPU is the order path's CPU seconds per accepted order, by part.
	CPU CPU `json:"cpu_s_per_order"`
}

// Target is one of the issue's targets, judged on this run's figures.
type Target struct {
	What   string `json:"what"`
	Figure string `json:"figure"`
	Pass   bool   `json:"pass"`
}

// Machine is where and how the figures were measured.
type Machine struct {
	When       string `json:"when"`
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	Memory     string `json:"memory"`
	Go         string `json:"go"`
	PostgreSQL string `json:"postgresql"`
	Fsync      string `json:"fsync"`
	SyncCommit string `json:"synchronous_commit"`
	Redis      string `json:"redis"`
	Commit     string `json:"commit"`
}

func machine(ctx context.Context, db *gorm.DB, rdb *redis.Client) Machine {
	m := Machine{When: time.Now().UTC().Format(time.RFC3339), Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPU, _ = infoField(string(b), "model name")
		m.CPU = strings.TrimSpace(m.CPU)
	}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH + " (no model name in /proc/cpuinfo)"
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		v, _ := infoField(string(b), "MemTotal")
		m.Memory = strings.TrimSpace(v)
	}
	db.WithContext(ctx).Raw("SHOW server_version").Scan(&m.PostgreSQL)
	db.WithContext(ctx).Raw("SHOW fsync").Scan(&m.Fsync)
	db.WithContext(ctx).Raw("SHOW synchronous_commit").Scan(&m.SyncCommit)
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		m.Redis, _ = infoField(info, "redis_version")
	}
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// summarize takes the medians per point, the costs per strategy, and judges the
// targets.
func (r *Results) summarize() {
	type key struct {
		s, w string
		v    int
	}
	groups := map[key][]Run{}
	var order []key
	for _, run := range r.Runs {
		k := key{run.Strategy, run.Workload, run.VUs}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], run)
	}
	r.Points = nil
	for _, k := range order {
		runs := groups[k]
		pick := func(f func(Run) float64) float64 {
			xs := make([]float64, len(runs))
			for i, x := range runs {
				xs[i] = f(x)
			}
			return median(xs)
		}
		p := Point{Strategy: k.s, Workload: k.w, VUs: k.v, Consistent: true,
			OrdersPerSec: pick(func(x Run) float64 { return x.OrdersPerSec }),
			P50:          pick(func(x Run) float64 { return x.P50 }),
			P95:          pick(func(x Run) float64 { return x.P95 }),
			P99:          pick(func(x Run) float64 { return x.P99 }),
			FailedRatio:  pick(func(x Run) float64 { return x.FailedRatio }),
			CPUPerOrder:  pick(func(x Run) float64 { return x.CPUPerOrder() }),
			OrdersMin:    math.Inf(1), P99Min: math.Inf(1)}
		for _, x := range runs {
			p.Oversold = max(p.Oversold, x.Oversold)
			p.Consistent = p.Consistent && x.Consistent
			p.OrdersMin, p.OrdersMax = min(p.OrdersMin, x.OrdersPerSec), max(p.OrdersMax, x.OrdersPerSec)
			p.P99Min, p.P99Max = min(p.P99Min, x.P99), max(p.P99Max, x.P99)
		}
		r.Points = append(r.Points, p)
	}
	r.Ceiling = nil
	for _, v := range r.Profile.VUs {
		var rps, p99 []float64
		for _, x := range r.CeilingRuns {
			if x.VUs == v {
				rps, p99 = append(rps, x.OrdersPerSec), append(p99, x.P99)
			}
		}
		if len(rps) > 0 {
			r.Ceiling = append(r.Ceiling, Ceiling{VUs: v, ReqsPerSec: median(rps), Min: slices.Min(rps), Max: slices.Max(rps), P99: median(p99)})
		}
	}
	r.Costs = nil
	for _, s := range r.strategies() {
		for _, w := range workloads {
			var c Cost
			var accepted, tripsAccepted int64
			var cmds, txs, trips int64
			for _, x := range r.Runs {
				if x.Strategy == s && x.Workload == w.Name {
					cmds, txs, accepted = cmds+x.RedisCmds, txs+x.DBWriteTxs, accepted+x.Accepted
					c.CPU = c.CPU.add(x.CPU)
					if x.RedisTrips > 0 {
						trips, tripsAccepted = trips+x.RedisTrips, tripsAccepted+x.Accepted
					}
				}
			}
			if accepted == 0 {
				continue
			}
			a := float64(accepted)
			c.Strategy, c.Workload = s, w.Name
			c.RedisPerOrder, c.DBWritesPerOrder = float64(cmds)/a, float64(txs)/a
			if tripsAccepted > 0 {
				c.TripsPerOrder = float64(trips) / float64(tripsAccepted)
			}
			c.CPU = c.CPU.div(a)
			r.Costs = append(r.Costs, c)
		}
	}
	r.Targets = r.judge()
}

func (r *Results) strategies() []string {
	var out []string
	for _, x := range r.Runs {
		if !slices.Contains(out, x.Strategy) {
			out = append(out, x.Strategy)
		}
	}
	return out
}

func (r *Results) point(s, w string, vus int) (Point, bool) {
	for _, p := range r.Points {
		if p.Strategy == s && p.Workload == w && p.VUs == vus {
			return p, true
		}
	}
	return Point{}, false
}

func safe(s string) bool { return s != string(orders.StrategyUnsafe) }

func (r *Results) cost(s, w string) (Cost, bool) {
	for _, c := range r.Costs {
		if c.Strategy == s && c.Workload == w {
			return c, true
		}
	}
	return Cost{}, false
}

// costPair is strategy s's cost on two workloads, when both were measured.
func (r *Results) costPair(s, a, b string) (Cost, Cost, bool) {
	if r == nil {
		return Cost{}, Cost{}, false
	}
	ca, ok1 := r.cost(s, a)
	cb, ok2 := r.cost(s, b)
	return ca, cb, ok1 && ok2
}

func (r *Results) ceilingAt(vus int) (Ceiling, bool) {
	for _, c := range r.Ceiling {
		if c.VUs == vus {
			return c, true
		}
	}
	return Ceiling{}, false
}

// bestOther is, at one point, the highest orders/s and the lowest p99 of the
// safe strategies other than the default, with who had them.
func (r *Results) bestOther(w string, vus int) (tput Point, p99 Point, ok bool) {
	for _, p := range r.Points {
		if p.Workload != w || p.VUs != vus || !safe(p.Strategy) || p.Strategy == r.Default {
			continue
		}
		if !ok || p.OrdersPerSec > tput.OrdersPerSec {
			tput = p
		}
		if !ok || p.P99 < p99.P99 {
			p99 = p
		}
		ok = true
	}
	return tput, p99, ok
}

// judge checks the targets of issue 17, each a ratio within this run.
func (r *Results) judge() []Target {
	var ts []Target
	top := slices.Max(r.Profile.VUs)
	pg := median(r.PgBench)
	for _, w := range workloads {
		for _, vus := range r.Profile.VUs {
			d, ok1 := r.point(r.Default, w.Name, vus)
			t, l, ok2 := r.bestOther(w.Name, vus)
			if !ok1 || !ok2 {
				continue
			}
			ts = append(ts, Target{What: fmt.Sprintf("%s, %d VUs: the default (%s) at least the best other safe strategy, orders/s and p99", w.Name, vus, r.Default),
				Figure: fmt.Sprintf("%.0f vs %.0f/s %s (%.2f×); p99 %.0f vs %.0f ms %s", d.OrdersPerSec, t.OrdersPerSec, t.Strategy,
					d.OrdersPerSec/max(t.OrdersPerSec, 1e-9), d.P99, l.P99, l.Strategy),
				Pass: d.OrdersPerSec >= t.OrdersPerSec && d.P99 <= l.P99})
		}
	}
	if d, ok := r.point(r.Default, "hot", top); ok {
		ts = append(ts, Target{What: fmt.Sprintf("hot SKU, %d VUs: the default at least 3× pgbench's one-row-per-commit tps", top),
			Figure: fmt.Sprintf("%.0f vs %.0f (%.2f×)", d.OrdersPerSec, pg, d.OrdersPerSec/max(pg, 1e-9)), Pass: d.OrdersPerSec >= 3*pg})
		if c, ok := r.ceilingAt(top); ok {
			ts = append(ts, Target{What: fmt.Sprintf("hot SKU, %d VUs: the default at least 50%% of the ceiling (GET %s, same replicas, balancer, generator, VUs)", top, ceilingPath),
				Figure: fmt.Sprintf("%.0f vs %.0f/s (%.0f%%)", d.OrdersPerSec, c.ReqsPerSec, 100*d.OrdersPerSec/max(c.ReqsPerSec, 1e-9)),
				Pass:   d.OrdersPerSec >= c.ReqsPerSec/2})
		}
	}
	for _, w := range workloads {
		limit := 100.0
		if w.Name == "multi" {
			limit = 200
		}
		if d, ok := r.point(r.Default, w.Name, top); ok {
			ts = append(ts, Target{What: fmt.Sprintf("%s, %d VUs: the default's p99 under %.0f ms", w.Name, top, limit),
				Figure: fmt.Sprintf("%.0f ms", d.P99), Pass: d.P99 < limit})
		}
	}
	for _, w := range workloads {
		d, ok1 := r.cost(r.Default, w.Name)
		a, ok2 := r.cost(string(orders.StrategyDBAtomic), w.Name)
		if ok1 && ok2 {
			ts = append(ts, Target{What: fmt.Sprintf("%s: the default's CPU per accepted order (replicas, Redis, PostgreSQL) at most db-atomic's", w.Name),
				Figure: fmt.Sprintf("%.0f vs %.0f µs (%.2f×)", 1e6*d.CPU.Total(), 1e6*a.CPU.Total(), d.CPU.Total()/max(a.CPU.Total(), 1e-12)),
				Pass:   d.CPU.Total() <= a.CPU.Total()})
		}
	}
	var peak int64
	var who string
	for s, b := range r.RSS {
		if b > peak {
			peak, who = b, s
		}
	}
	ts = append(ts, Target{What: "every replica's peak RSS under 64 MiB", Figure: fmt.Sprintf("%.1f MiB at most (%s)", float64(peak)/(1<<20), who),
		Pass: peak > 0 && peak < 64<<20})
	var anon Memory
	who = ""
	for s, m := range r.Memory {
		if m.RssAnon > anon.RssAnon {
			anon, who = m, s
		}
	}
	figure := "not measured"
	if anon.RssAnon > 0 {
		figure = fmt.Sprintf("%s at most (%s)", fmtMemory(anon), who)
	}
	ts = append(ts, Target{What: "every replica's peak RssAnon under 40 MiB", Figure: figure,
		Pass: anon.RssAnon > 0 && anon.RssAnon < 40<<20})
	for _, s := range r.strategies() {
		var over int64
		consistent := true
		for _, x := range append(slices.Clone(r.Runs), r.Sellout[s]) {
			if x.Strategy == s {
				over += x.Oversold
				consistent = consistent && x.Consistent
			}
		}
		if safe(s) {
			ts = append(ts, Target{What: s + ": zero units oversold, I1 holds, in every run and the sell-out",
				Figure: fmt.Sprintf("%d oversold, consistent: %v", over, consistent), Pass: over == 0 && consistent})
		} else {
			ts = append(ts, Target{What: "unsafe (the control group) oversells in the sell-out",
				Figure: fmt.Sprintf("%d oversold", r.Sellout[s].Oversold), Pass: r.Sellout[s].Oversold > 0})
		}
	}
	return ts
}

func (r *Results) write(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "results.json"), b, 0o644); err != nil {
		return err
	}
	if err := r.charts(o.out); err != nil {
		return fmt.Errorf("charts: %w", err)
	}
	in, err := loadIssueInputs(o.out, issueInputs{r: r, h: r.Holds})
	if err != nil {
		return err
	}
	kept, err := keptSections(o.markdown)
	if err != nil {
		return err
	}
	f, err := os.Create(o.markdown)
	if err != nil {
		return err
	}
	r.markdown(f, o, in)
	if err := f.Close(); err != nil {
		return err
	}
	return restoreSections(o.markdown, kept)
}

func (r *Results) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\npgbench (guarded single-row UPDATE, 8 clients): %.0f tps\n\n", median(r.PgBench))
	r.table(w)
	fmt.Fprintln(w)
	for _, t := range r.Targets {
		mark := "PASS"
		if !t.Pass {
			mark = "MISS"
		}
		fmt.Fprintf(w, "%s  %s: %s\n", mark, t.What, t.Figure)
	}
	if r.Holds != nil {
		r.Holds.printSummary(w)
	}
	if r.Locks != nil {
		r.Locks.printSummary(w)
	}
	if r.Events != nil {
		r.Events.printSummary(w)
	}
	if r.Auth != nil {
		r.Auth.printSummary(w)
	}
	if r.Locations != nil {
		r.Locations.printSummary(w)
	}
}

// table prints orders/s and p99 per strategy and point, as Markdown.
func (r *Results) table(w io.Writer) {
	fmt.Fprint(w, "| strategy |")
	type col struct {
		w   string
		vus int
	}
	var cols []col
	for _, wl := range workloads {
		for _, v := range r.Profile.VUs {
			if _, ok := r.point(r.strategies()[0], wl.Name, v); ok {
				cols = append(cols, col{wl.Name, v})
				fmt.Fprintf(w, " %s %d |", wl.Name, v)
			}
		}
	}
	fmt.Fprint(w, "\n|---|")
	for range cols {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	if len(r.Ceiling) > 0 {
		fmt.Fprintf(w, "| ceiling: GET %s |", ceilingPath)
		for _, c := range cols {
			if cl, ok := r.ceilingAt(c.vus); ok {
				fmt.Fprintf(w, " %.0f/s, p99 %.0f ms |", cl.ReqsPerSec, cl.P99)
			} else {
				fmt.Fprint(w, " – |")
			}
		}
		fmt.Fprintln(w)
	}
	for _, s := range r.strategies() {
		fmt.Fprintf(w, "| %s |", s)
		for _, c := range cols {
			p, _ := r.point(s, c.w, c.vus)
			fmt.Fprintf(w, " %.0f/s ±%.0f%%, p99 %.0f ms |", p.OrdersPerSec, 100*p.Spread(), p.P99)
		}
		fmt.Fprintln(w)
	}
}

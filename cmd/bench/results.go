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
	Machine  Machine          `json:"machine"`
	Profile  Profile          `json:"profile"`
	Replicas int              `json:"replicas"`
	Default  string           `json:"default_strategy"`
	PgBench  []float64        `json:"pgbench_tps"`
	Runs     []Run            `json:"runs"`
	Sellout  map[string]Run   `json:"sellout"`
	RSS      map[string]int64 `json:"peak_rss_bytes"`
	Points   []Point          `json:"points"`
	Costs    []Cost           `json:"costs"`
	Targets  []Target         `json:"targets"`
	Holds    *HoldsResults    `json:"holds,omitempty"`
	Locks    *LocksResults    `json:"locks,omitempty"`
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
}

// Cost is what a strategy spends per accepted order, over all its runs.
type Cost struct {
	Strategy         string  `json:"strategy"`
	RedisPerOrder    float64 `json:"redis_commands_per_order"`
	DBWritesPerOrder float64 `json:"db_write_transactions_per_order"`
}

// Target is one of the targets, judged on this run's figures.
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
			FailedRatio:  pick(func(x Run) float64 { return x.FailedRatio })}
		for _, x := range runs {
			p.Oversold = max(p.Oversold, x.Oversold)
			p.Consistent = p.Consistent && x.Consistent
		}
		r.Points = append(r.Points, p)
	}
	r.Costs = nil
	for _, s := range r.strategies() {
		var cmds, txs, accepted int64
		for _, x := range r.Runs {
			if x.Strategy == s {
				cmds, txs, accepted = cmds+x.RedisCmds, txs+x.DBWriteTxs, accepted+x.Accepted
			}
		}
		a := float64(max(accepted, 1))
		r.Costs = append(r.Costs, Cost{Strategy: s, RedisPerOrder: float64(cmds) / a, DBWritesPerOrder: float64(txs) / a})
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

// bestSafe is the safe strategy with the highest geometric mean of orders/s over
// every point measured.
func (r *Results) bestSafe() string {
	best, bestScore := "", -1.0
	for _, s := range r.strategies() {
		if !safe(s) {
			continue
		}
		sum, n := 0.0, 0
		for _, p := range r.Points {
			if p.Strategy == s {
				sum += math.Log(max(p.OrdersPerSec, 1e-3))
				n++
			}
		}
		if score := sum / float64(max(n, 1)); score > bestScore {
			best, bestScore = s, score
		}
	}
	return best
}

func (r *Results) judge() []Target {
	var ts []Target
	top := slices.Max(r.Profile.VUs)
	pg := median(r.PgBench)
	// The best safe strategy on the hot SKU at the most VUs.
	var hot Point
	for _, p := range r.Points {
		if p.Workload == "hot" && p.VUs == top && safe(p.Strategy) && p.OrdersPerSec > hot.OrdersPerSec {
			hot = p
		}
	}
	if hot.Strategy != "" {
		ts = append(ts, Target{What: fmt.Sprintf("hot SKU, %d VUs: best safe strategy (%s) at least pgbench's single-row tps", top, hot.Strategy),
			Figure: fmt.Sprintf("%.0f vs %.0f orders/s (%.2f×)", hot.OrdersPerSec, pg, hot.OrdersPerSec/max(pg, 1e-9)), Pass: hot.OrdersPerSec >= pg})
		if poll, ok := r.point(string(orders.StrategyLockPolling), "hot", top); ok {
			ratio := hot.OrdersPerSec / max(poll.OrdersPerSec, 1e-9)
			ts = append(ts, Target{What: fmt.Sprintf("hot SKU, %d VUs: best safe strategy at least 10× lock-polling", top),
				Figure: fmt.Sprintf("%.0f vs %.0f orders/s (%.1f×)", hot.OrdersPerSec, poll.OrdersPerSec, ratio), Pass: ratio >= 10})
		}
		ts = append(ts, Target{What: fmt.Sprintf("hot SKU, %d VUs: best safe strategy's p99 under 100 ms", top),
			Figure: fmt.Sprintf("%.1f ms", hot.P99), Pass: hot.P99 < 100})
	}
	for _, vus := range r.Profile.VUs {
		d, ok1 := r.point(r.Default, "zipf", vus)
		a, ok2 := r.point(string(orders.StrategyDBAtomic), "zipf", vus)
		if ok1 && ok2 {
			ratio := d.OrdersPerSec / max(a.OrdersPerSec, 1e-9)
			ts = append(ts, Target{What: fmt.Sprintf("100 SKUs zipf, %d VUs: the default (%s) at least 70%% of db-atomic", vus, r.Default),
				Figure: fmt.Sprintf("%.0f vs %.0f orders/s (%.0f%%)", d.OrdersPerSec, a.OrdersPerSec, 100*ratio), Pass: ratio >= 0.7})
		}
	}
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
	var peak int64
	var who string
	for s, b := range r.RSS {
		if b > peak {
			peak, who = b, s
		}
	}
	ts = append(ts, Target{What: "every replica's peak RSS under 64 MiB", Figure: fmt.Sprintf("%.1f MiB at most (%s)", float64(peak)/(1<<20), who),
		Pass: peak > 0 && peak < 64<<20})
	best := r.bestSafe()
	ts = append(ts, Target{What: "the default strategy is the best safe one measured (geometric mean of orders/s over every point)",
		Figure: fmt.Sprintf("default %s, best %s", r.Default, best), Pass: best == r.Default})
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
	f, err := os.Create(o.markdown)
	if err != nil {
		return err
	}
	r.markdown(f, o)
	return f.Close()
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
	for _, s := range r.strategies() {
		fmt.Fprintf(w, "| %s |", s)
		for _, c := range cols {
			p, _ := r.point(s, c.w, c.vus)
			fmt.Fprintf(w, " %.0f/s, p99 %.0f ms |", p.OrdersPerSec, p.P99)
		}
		fmt.Fprintln(w)
	}
}

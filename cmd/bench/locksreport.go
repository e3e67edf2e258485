package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const locksHeading = "## Lock services"

// LocksResults are what the lock services benchmark measured.
type LocksResults struct {
	Command  string        `json:"command"`
	When     string        `json:"when"`
	Commit   string        `json:"commit"`
	Strategy string        `json:"strategy"`
	Replicas int           `json:"replicas"`
	VUs      int           `json:"vus"`
	Repeats  int           `json:"repeats"`
	Duration time.Duration `json:"duration_ns"`
	Warmup   time.Duration `json:"warmup_ns"`
	// The machine's cores and its one-minute load average before and after:
	// above the cores, other work shared them.
	Cores      int           `json:"cores"`
	LoadBefore float64       `json:"load_average_before"`
	LoadAfter  float64       `json:"load_average_after"`
	Services   []LockService `json:"lock_services"`
	Runs       []LockRun     `json:"runs"`
	Points     []LockPoint   `json:"points"`
}

// LockService is one contender, or why it was not run.
type LockService struct {
	Name   string `json:"name"`
	Where  string `json:"where"`
	NotRun string `json:"not_run,omitempty"`
}

// LockRun is one load generator run on one lock service, in one round (each
// round runs every lock service once, one after the other).
type LockRun struct {
	Service string `json:"lock_service"`
	Round   int    `json:"round"`
	Run
	// Commands the Redlock servers processed over the run (0 for the others).
	LockCmds int64 `json:"lock_server_commands"`
	// PeakRSS is the largest peak resident set (VmHWM) of the run's replicas.
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
}

// LockPoint is one lock service's medians on one workload, and its ratios to
// the Redis lock service's.
type LockPoint struct {
	Workload     string  `json:"workload"`
	Title        string  `json:"title"`
	Service      string  `json:"lock_service"`
	Runs         int     `json:"runs"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P99          float64 `json:"p99_ms"`
	// The medians of the rounds' ratios to the Redis run of the same round;
	// 0 when there is none.
	Ratio    float64 `json:"orders_per_s_to_redis"`
	P99Ratio float64 `json:"p99_to_redis"`
	Failed   float64 `json:"http_req_failed"`
	// Over all the runs, per accepted order: Redis commands (the cache's Redis
	// and the Redlock servers) and database write transactions.
	RedisPerOrder    float64 `json:"redis_commands_per_order"`
	DBWritesPerOrder float64 `json:"db_write_transactions_per_order"`
	// CPU is the order path's CPU per accepted order over all the runs: the
	// replicas, Redis, PostgreSQL and the lock service's own servers.
	CPU        CPU   `json:"cpu_s_per_order"`
	Oversold   int64 `json:"oversold"`
	Consistent bool  `json:"consistent"`
	// PeakRSS is the largest replica's peak resident set over the runs.
	PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
	// Memory is the highest RssAnon a replica reached over the runs' load
	// phases, with its RssFile then.
	Memory Memory `json:"peak_rss_anon,omitzero"`
}

// lockBase is the lock service the others are compared with.
const lockBase = "redis"

// lockPoints takes the medians per workload and lock service (in the order of
// wls and services), and the medians of the rounds' ratios to lockBase.
func lockPoints(runs []LockRun, services []string, wls []Workload) []LockPoint {
	var out []LockPoint
	for _, w := range wls {
		base := map[int]Run{}
		for _, r := range runs {
			if r.Workload == w.Name && r.Service == lockBase {
				base[r.Round] = r.Run
			}
		}
		for _, s := range services {
			p := LockPoint{Workload: w.Name, Title: w.Title, Service: s, Consistent: true}
			var rate, p99, failed, ratio, p99Ratio []float64
			var cmds, txs, accepted int64
			var cpu CPU
			for _, r := range runs {
				if r.Workload != w.Name || r.Service != s {
					continue
				}
				p.Runs++
				rate, p99, failed = append(rate, r.OrdersPerSec), append(p99, r.P99), append(failed, r.FailedRatio)
				if b, ok := base[r.Round]; ok {
					if b.OrdersPerSec > 0 {
						ratio = append(ratio, r.OrdersPerSec/b.OrdersPerSec)
					}
					if b.P99 > 0 {
						p99Ratio = append(p99Ratio, r.P99/b.P99)
					}
				}
				cmds, txs, accepted = cmds+r.RedisCmds+r.LockCmds, txs+r.DBWriteTxs, accepted+r.Accepted
				cpu = cpu.add(r.CPU)
				p.Oversold += r.Oversold
				p.Consistent = p.Consistent && r.Consistent
				p.PeakRSS = max(p.PeakRSS, r.PeakRSS)
				p.Memory = p.Memory.higher(r.Memory)
			}
			if p.Runs == 0 {
				continue
			}
			p.OrdersPerSec, p.P99, p.Failed = median(rate), median(p99), median(failed)
			p.Ratio, p.P99Ratio = median(ratio), median(p99Ratio)
			a := float64(max(accepted, 1))
			p.RedisPerOrder, p.DBWritesPerOrder = float64(cmds)/a, float64(txs)/a
			p.CPU = cpu.div(a)
			out = append(out, p)
		}
	}
	return out
}

// run is the names of the lock services that are run, in order.
func (l *LocksResults) run() []string {
	var out []string
	for _, s := range l.Services {
		if s.NotRun == "" {
			out = append(out, s.Name)
		}
	}
	return out
}

func (l *LocksResults) point(w, s string) (LockPoint, bool) {
	for _, p := range l.Points {
		if p.Workload == w && p.Service == s {
			return p, true
		}
	}
	return LockPoint{}, false
}

// titles are the workloads measured, as (name, title), in order.
func (l *LocksResults) titles() [][2]string {
	var out [][2]string
	for _, p := range l.Points {
		if !slices.ContainsFunc(out, func(t [2]string) bool { return t[0] == p.Workload }) {
			out = append(out, [2]string{p.Workload, p.Title})
		}
	}
	return out
}

// fmtMiB is "61.8 MiB", or "—" when not measured (results of an older run).
func fmtMiB(b int64) string {
	if b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// fmtRatio is "0.93×", or "—" for no ratio.
func fmtRatio(r float64) string {
	if r <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

// markdown writes the report's Lock services section.
func (l *LocksResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\nMeasured by `%s` (profile %s) on %s, commit %s: the default strategy (%s), %d replicas behind the balancer, %d VUs, with the load generator of the strategies' runs (quantity 1, an Idempotency-Key on every order, no retries or cancels); each figure the median of %d runs of %s. The lock services take turns (%s, then again), each run on emptied tables (the lock table too), new replicas and a Redis namespace of their own, after a %s warm-up and ANALYZE; the ratios to %s are the medians of each round's ratio to the %s run of that round. **Read the ratios, not the absolute figures:** the machine has %d cores shared by the replicas, the balancer, the generator, Redis, PostgreSQL and whatever else runs on it (%s), and its disk moves absolute figures up to 2× between runs.\n\n",
		locksHeading, l.Command, profileName(l.Command), l.When, l.Commit, l.Strategy, l.Replicas, l.VUs, l.Repeats, l.Duration,
		strings.Join(l.run(), ", "), l.Warmup, lockBase, lockBase, l.Cores, loadNote(l.Cores, l.LoadBefore, l.LoadAfter))
	fmt.Fprint(w, "| workload | lock service | orders/s | p99 | orders/s to redis | p99 to redis | CPU µs / order (of it, the lock service's) | Redis commands / order | DB write transactions / order | peak RSS per replica | peak RssAnon per replica (its RssFile then) | audit |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, t := range l.titles() {
		for _, s := range l.Services {
			if s.NotRun != "" {
				fmt.Fprintf(w, "| %s | %s | not run: %s | | | | | | | | | |\n", t[1], s.Name, mdEscape(s.NotRun))
				continue
			}
			p, ok := l.point(t[0], s.Name)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f ms | %s | %s | %s | %.2f | %.3f | %s | %s | %d oversold, consistent: %v |\n", t[1], s.Name,
				p.OrdersPerSec, p.P99, fmtRatio(p.Ratio), fmtRatio(p.P99Ratio), fmtCPU(p.CPU), p.RedisPerOrder, p.DBWritesPerOrder, fmtMiB(p.PeakRSS), fmtMemory(p.Memory), p.Oversold, p.Consistent)
		}
	}
	if len(l.Points) == 0 {
		for _, s := range l.Services {
			if s.NotRun != "" {
				fmt.Fprintf(w, "| — | %s | not run: %s | | | | | | | | | |\n", s.Name, mdEscape(s.NotRun))
			}
		}
	}
	fmt.Fprintf(w, "\n![orders/s and p99 per lock service and workload](%s/locks.png)\n\n", out)
	for _, s := range l.Services {
		line := fmt.Sprintf("- **%s**: the SKU locks and the sweeper's lease in %s", s.Name, s.Where)
		if s.NotRun != "" {
			line += fmt.Sprintf(". Not run: %s", mdEscape(s.NotRun))
		}
		fmt.Fprintln(w, line+".")
	}
	fmt.Fprint(w, `
The PostgreSQL lock service writes its lock rows in the same database as the store, so
a lock's obtain and release are transactions of their own (counted in the write
transactions per order above) that share the WAL and its fsync with the orders' commits.
Redis commands count the cache's Redis for every service, and for Redlock also its three
servers; write transactions are the transaction ids the whole PostgreSQL server assigned
over a run, so other work on that server (other databases' tests) adds to them. Both are
summed over the runs and divided by the orders accepted, seeding and audit included. The
Redis and Redlock servers are in memory, without persistence; etcd and ZooKeeper fsync
every write to this machine's disk before they answer, as a real deployment would;
Azurite keeps its blobs in memory and saves them every few seconds (a real storage
account replicates each write before it answers, over a network: expect it slower).
`)
}

// loadNote reads the load averages against the cores.
// mdEscape keeps a line of text from breaking a Markdown table.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func (l *LocksResults) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\nlock services on %s, %d VUs (median of %d runs of %s; load average %.1f before, %.1f after, %d cores):\n",
		l.Strategy, l.VUs, l.Repeats, l.Duration, l.LoadBefore, l.LoadAfter, l.Cores)
	for _, p := range l.Points {
		fmt.Fprintf(w, "  %-5s %-9s orders %6.0f/s (%s redis)  p99 %5.0f ms (%s redis)  oversold %d consistent %v\n",
			p.Workload, p.Service, p.OrdersPerSec, fmtRatio(p.Ratio), p.P99, fmtRatio(p.P99Ratio), p.Oversold, p.Consistent)
	}
	for _, s := range l.Services {
		if s.NotRun != "" {
			fmt.Fprintf(w, "  %s: not run: %s\n", s.Name, s.NotRun)
		}
	}
}

// writeOnly writes locks.json and locks.png, and replaces the Lock services
// section of the report in place (or adds it), leaving the rest as it was.
func (l *LocksResults) writeOnly(o options) error {
	if err := l.writeFiles(o.out); err != nil {
		return err
	}
	return replaceSection(o, locksHeading, l.markdown)
}

// writeFiles writes locks.json and locks.png into dir.
func (l *LocksResults) writeFiles(dir string) error { return writeResults(dir, "locks", l, l.chart) }

// chart draws locks.png: orders/s and p99, grouped by workload, a bar per lock
// service, the ratios to Redis in the legends.
func (l *LocksResults) chart(path string) error {
	ts := l.titles()
	if len(ts) == 0 {
		return nil // nothing measured: the section says why
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t[1]
	}
	run := l.run()
	panels := make([]*plot.Plot, 0, 2)
	for _, panel := range []struct {
		title, unit string
		f, ratio    func(LockPoint) float64
	}{
		{"accepted orders/s", "orders/s", func(p LockPoint) float64 { return p.OrdersPerSec }, func(p LockPoint) float64 { return p.Ratio }},
		{"p99 latency", "ms", func(p LockPoint) float64 { return p.P99 }, func(p LockPoint) float64 { return p.P99Ratio }},
	} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s, %d VUs: %s", l.Strategy, l.VUs, panel.title)
		p.Y.Label.Text = panel.unit
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		width := vg.Points(22)
		for k, s := range run {
			vals := make(plotter.Values, len(ts))
			rs := make([]string, len(ts))
			for i, t := range ts {
				pt, _ := l.point(t[0], s)
				vals[i], rs[i] = panel.f(pt), fmtRatio(panel.ratio(pt))
			}
			bars, err := plotter.NewBarChart(vals, width)
			if err != nil {
				return err
			}
			bars.Color, bars.LineStyle.Width = palette[slices.Index(lockServices, s)%len(palette)], 0
			bars.Offset = width * (vg.Length(k) - vg.Length(len(run)-1)/2)
			p.Add(bars)
			// The figure above each bar.
			xys := make([]plotter.XY, len(vals))
			text := make([]string, len(vals))
			for i, v := range vals {
				xys[i], text[i] = plotter.XY{X: float64(i), Y: v}, fmt.Sprintf("%.0f", v)
			}
			labels, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
			if err != nil {
				return err
			}
			for i := range labels.TextStyle {
				labels.TextStyle[i].XAlign, labels.TextStyle[i].Font.Size = -0.5, vg.Points(8)
			}
			labels.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
			p.Add(labels)
			if s == lockBase {
				p.Legend.Add(s, bars)
			} else {
				p.Legend.Add(fmt.Sprintf("%s (%s of redis)", s, strings.Join(rs, ", ")), bars)
			}
		}
		for _, s := range l.Services {
			if s.NotRun != "" {
				p.Legend.Add(s.Name + ": not run")
			}
		}
		p.NominalX(names...)
		p.Y.Min = 0
		p.Y.Max *= 1.35 // room for the legend
		p.Y.Tick.Marker = wholeTicks{}
		panels = append(panels, p)
	}
	return savePanels(path, panels)
}

// fmtCPU is CPU per order in µs, with the lock service's own share when it
// has servers of its own; "–" when not measured (results from before it was).
func fmtCPU(c CPU) string {
	switch {
	case c.Total() == 0:
		return "–"
	case c.LockService > 0:
		return fmt.Sprintf("%.0f (%.0f)", 1e6*c.Total(), 1e6*c.LockService)
	}
	return fmt.Sprintf("%.0f", 1e6*c.Total())
}

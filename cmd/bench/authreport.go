package main

import (
	"fmt"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const authHeading = "## Authentication and rate limits"

// AuthResults are what the authentication benchmark measured.
type AuthResults struct {
	onOff
	// The bench client's rate limit, all replicas together.
	RatePerSecond float64     `json:"rate_limit_per_second"`
	Burst         float64     `json:"rate_limit_burst"`
	Runs          []AuthRun   `json:"runs"`
	Points        []AuthPoint `json:"points"`
	Costs         []AuthCost  `json:"costs"`
}

// AuthRun is one run of one configuration.
type AuthRun struct {
	Config string `json:"auth"` // off (--insecure-no-auth) or on
	Round  int    `json:"round"`
	Run    Run    `json:"run"`
	// Limited is the replicas' 429 answers over the warm-up and the run.
	Limited int64 `json:"http_429"`
}

// AuthPoint is one configuration on one workload, its runs pooled.
type AuthPoint struct {
	Workload string `json:"workload"`
	Config   string `json:"auth"`
	// Rate is the runs' orders over their seconds; OrdersPerSec their median.
	Rate         float64 `json:"orders_per_s_pooled"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P99          float64 `json:"p99_ms"` // the runs' median
	FailedRatio  float64 `json:"http_req_failed"`
	Limited      int64   `json:"http_429"` // every run's
	Oversold     int64   `json:"oversold_max"`
	Consistent   bool    `json:"consistent_all"`
	CPU          CPU     `json:"cpu_s_per_order"` // pooled
}

// AuthCost is one workload's checks on ÷ off.
type AuthCost struct {
	Workload string  `json:"workload"`
	Rate     float64 `json:"orders_per_s_ratio"` // pooled orders/s
	Replicas float64 `json:"replicas_ratio"`     // the replicas' CPU per order
	Path     float64 `json:"path_ratio"`         // replicas, Redis and PostgreSQL
	// Each round's ratios, for the spread.
	PairRate     []float64 `json:"pair_orders_per_s_ratios"`
	PairReplicas []float64 `json:"pair_replicas_ratios"`
}

// authPoints pools each configuration's runs per workload, and takes the
// ratios.
func authPoints(runs []AuthRun, wls []Workload) ([]AuthPoint, []AuthCost) {
	var points []AuthPoint
	var costs []AuthCost
	for _, w := range wls {
		byCfg := map[string]AuthPoint{}
		for _, cfg := range authConfigs {
			var rs []Run
			var limited int64
			for _, r := range runs {
				if r.Run.Workload == w.Name && r.Config == cfg {
					rs, limited = append(rs, r.Run), limited+r.Limited
				}
			}
			pl, ok := pool(rs)
			if !ok {
				continue
			}
			p := AuthPoint{Workload: w.Name, Config: cfg, Rate: pl.Rate, OrdersPerSec: pl.OrdersPerSec, P99: pl.P99,
				FailedRatio: pl.FailedRatio, Limited: limited, Oversold: pl.Oversold, Consistent: pl.Consistent, CPU: pl.CPU}
			byCfg[cfg] = p
			points = append(points, p)
		}
		off, ok1 := byCfg[authOff]
		on, ok2 := byCfg[authOn]
		if !ok1 || !ok2 {
			continue
		}
		pairs := roundPairs(runs, w.Name, authOff, authOn, func(r AuthRun) (string, int, Run) { return r.Config, r.Round, r.Run })
		costs = append(costs, AuthCost{Workload: w.Name, Rate: on.Rate / max(off.Rate, 1e-12),
			Replicas: on.CPU.Replicas / max(off.CPU.Replicas, 1e-12), Path: authPath(on.CPU) / max(authPath(off.CPU), 1e-12),
			PairRate:     pairRatios(pairs, func(r Run) float64 { return float64(r.Accepted) / max(r.Seconds, 1e-9) }),
			PairReplicas: pairRatios(pairs, func(r Run) float64 { return r.CPU.Replicas / float64(r.Accepted) })})
	}
	return points, costs
}

// authPath is the whole order path's CPU: replicas, Redis and PostgreSQL.
func authPath(c CPU) float64 { return c.Replicas + c.Redis + c.Postgres }

func (a *AuthResults) point(w, cfg string) (AuthPoint, bool) {
	for _, p := range a.Points {
		if p.Workload == w && p.Config == cfg {
			return p, true
		}
	}
	return AuthPoint{}, false
}

// limited is every run's 429s.
func (a *AuthResults) limited() int64 {
	var n int64
	for _, r := range a.Runs {
		n += r.Limited
	}
	return n
}

// markdown writes the report's authentication section.
func (a *AuthResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\n", authHeading)
	fmt.Fprintf(w, "Measured by `%s` (profile %s) on %s, commit %s: the default strategy (%s), %d replicas behind the balancer, %d VUs, with the load generator of the strategies' runs (quantity 1, an Idempotency-Key on every order). Two configurations take turns in ABBA order (off then on, then on then off, ...), %d rounds, each run on emptied tables and new replicas after a %s warm-up and ANALYZE, each run %s: **checks off** (`--insecure-no-auth`: every request is taken as the admin's, no credential read, no scope or rate limit checked; the load generator's admin token goes unread) and **checks on** (a client made with the admin token once the replicas are up, with a rate limit of %s requests/s and a burst of %s, all replicas together, far above the load; the load generator sends its key with `-api-key` on every order, so that each is authenticated, its scopes checked, and rate limited: its tokens leased from the client's bucket in Redis and spent in the replica; the admin token, never rate limited, keeps only the seeding and the audit). Orders/s are each configuration's orders over its runs' seconds (pooled), p99 the median of its runs'; CPU per order is the sum of the runs' CPU over the sum of their orders, as in the cost table above. The 429s are the replicas' own count (`%s{status=\"429\"}`) over each run and its warm-up. The CPU target is the replicas': the checks run there (the rate limit's leases also in Redis, in the whole path); PostgreSQL's CPU is the whole server's, any other database's work on it included, so the whole path's ratio moves with the machine's other work. The machine has %d cores shared by the replicas, the balancer, the generator, Redis, PostgreSQL and whatever else runs on it (%s): **read the ratios, not the absolute figures**.\n\n",
		a.Command, profileName(a.Command), a.When, a.Commit, a.Strategy, a.Replicas, a.VUs, a.Repeats, a.Warmup, a.Duration,
		thousands(int64(a.RatePerSecond)), thousands(int64(a.Burst)), requestsMetric, a.Cores, loadNote(a.Cores, a.LoadBefore, a.LoadAfter))
	fmt.Fprint(w, "| workload | checks | orders/s | p99 | CPU µs / order: replicas + Redis + PostgreSQL = whole path | failed | 429s | audit |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range a.Costs {
		for _, cfg := range authConfigs {
			p, ok := a.point(c.Workload, cfg)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f ms | %.0f + %.0f + %.0f = **%.0f** | %.2f%% | %d | %d oversold, consistent: %v |\n",
				workloadTitle(c.Workload), cfg, p.Rate, p.P99, 1e6*p.CPU.Replicas, 1e6*p.CPU.Redis, 1e6*p.CPU.Postgres, 1e6*authPath(p.CPU),
				100*p.FailedRatio, p.Limited, p.Oversold, p.Consistent)
		}
	}
	fmt.Fprint(w, "\n| workload | orders/s, on ÷ off (each round's) | replicas' CPU / order, on ÷ off (each round's) | whole path CPU / order, on ÷ off | p99 off → on |\n|---|---:|---:|---:|---:|\n")
	for _, c := range a.Costs {
		off, _ := a.point(c.Workload, authOff)
		on, _ := a.point(c.Workload, authOn)
		fmt.Fprintf(w, "| %s | **%.2f×** (%s) | **%.2f×** (%s) | %.2f× | %.0f → %.0f ms |\n", workloadTitle(c.Workload), c.Rate, fmtRatios(c.PairRate),
			c.Replicas, fmtRatios(c.PairReplicas), c.Path, off.P99, on.P99)
	}
	for _, c := range a.Costs {
		spreadNote(w, workloadTitle(c.Workload)+", orders/s", c.PairRate, 1.2)
		spreadNote(w, workloadTitle(c.Workload)+", the replicas' CPU per order", c.PairReplicas, 1.2)
	}
	fmt.Fprintf(w, "\n![orders/s with the checks off and on, and their ratios](%s/auth.png)\n", out)
	fmt.Fprint(w, "\n### Issue 39: targets\n\n| what | target | this run | |\n|---|---:|---|---|\n")
	for _, c := range a.Costs {
		fmt.Fprintf(w, "| %s, %d VUs: orders/s with every order authenticated and rate limited ÷ with the checks off | ≥ %.2f× | %.2f× | %s |\n",
			workloadTitle(c.Workload), a.VUs, authRateTarget, c.Rate, mark(c.Rate >= authRateTarget))
		fmt.Fprintf(w, "| %s, %d VUs: the replicas' CPU per order, the same | ≤ %.2f× | %.2f× | %s |\n",
			workloadTitle(c.Workload), a.VUs, authCPUTarget, c.Replicas, mark(c.Replicas > 0 && c.Replicas <= authCPUTarget))
	}
	n := a.limited()
	fmt.Fprintf(w, "| 429s: the limits high enough not to refuse | 0 | %d | %s |\n", n, mark(n == 0 && len(a.Runs) > 0))
}

func (a *AuthResults) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\nauthentication and rate limits on %s, %d VUs (%d ABBA rounds of %s; load average %.1f before, %.1f after, %d cores):\n",
		a.Strategy, a.VUs, a.Repeats, a.Duration, a.LoadBefore, a.LoadAfter, a.Cores)
	for _, p := range a.Points {
		fmt.Fprintf(w, "  %-5s checks %-3s orders %6.0f/s  p99 %5.0f ms  CPU/order %4.0f µs (replicas %4.0f)  429s %d  oversold %d consistent %v\n",
			p.Workload, p.Config, p.Rate, p.P99, 1e6*authPath(p.CPU), 1e6*p.CPU.Replicas, p.Limited, p.Oversold, p.Consistent)
	}
	for _, c := range a.Costs {
		fmt.Fprintf(w, "  %-5s on ÷ off: orders/s %.2f× (rounds %s; target ≥ %.2f), replicas' CPU/order %.2f× (rounds %s; target ≤ %.2f), whole path %.2f×\n",
			c.Workload, c.Rate, fmtRatios(c.PairRate), authRateTarget, c.Replicas, fmtRatios(c.PairReplicas), authCPUTarget, c.Path)
	}
}

// writeOnly writes auth.json and auth.png, and replaces the section of the
// report in place (or adds it), leaving the rest as it was.
func (a *AuthResults) writeOnly(o options) error {
	if err := a.writeFiles(o.out); err != nil {
		return err
	}
	return replaceSection(o, authHeading, a.markdown)
}

// writeFiles writes auth.json and auth.png into dir.
func (a *AuthResults) writeFiles(dir string) error { return writeResults(dir, "auth", a, a.chart) }

// chart draws auth.png: each workload's orders/s off and on, and the ratios
// with each round's and the targets.
func (a *AuthResults) chart(path string) error {
	if len(a.Costs) == 0 {
		return nil
	}
	names := make([]string, len(a.Costs))
	for i, c := range a.Costs {
		names[i] = workloadTitle(c.Workload)
	}
	width := vg.Points(22)
	bars := func(p *plot.Plot, k, of int, vals plotter.Values, label string, format string) error {
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = palette[k%len(palette)], 0
		b.Offset = width * (vg.Length(k) - vg.Length(of-1)/2)
		p.Add(b)
		p.Legend.Add(label, b)
		xys := make([]plotter.XY, len(vals))
		text := make([]string, len(vals))
		for i, v := range vals {
			xys[i], text[i] = plotter.XY{X: float64(i), Y: v}, fmt.Sprintf(format, v)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
		if err != nil {
			return err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].XAlign, l.TextStyle[i].Font.Size = -0.5, vg.Points(8)
		}
		l.Offset = vg.Point{X: b.Offset, Y: vg.Points(2)}
		p.Add(l)
		return nil
	}

	rate := plot.New()
	rate.Title.Text = fmt.Sprintf("%s, %d VUs: accepted orders/s", a.Strategy, a.VUs)
	rate.Y.Label.Text = "orders/s"
	rate.Add(plotter.NewGrid())
	rate.Legend.Top = true
	for k, cfg := range authConfigs {
		vals := make(plotter.Values, len(a.Costs))
		for i, c := range a.Costs {
			p, _ := a.point(c.Workload, cfg)
			vals[i] = p.Rate
		}
		if err := bars(rate, k, len(authConfigs), vals, "checks "+cfg, "%.0f"); err != nil {
			return err
		}
	}
	rate.NominalX(names...)
	rate.Y.Min = 0
	rate.Y.Max *= 1.35 // room for the legend
	rate.Y.Tick.Marker = wholeTicks{}

	ratio := plot.New()
	ratio.Title.Text = "checks on ÷ off (dots: each round's)"
	ratio.Y.Label.Text = "×"
	ratio.Add(plotter.NewGrid())
	ratio.Legend.Top = true
	top := authCPUTarget
	for k, part := range []struct {
		label  string
		pooled func(AuthCost) float64
		rounds func(AuthCost) []float64
	}{
		{fmt.Sprintf("orders/s (≥ %.2f)", authRateTarget), func(c AuthCost) float64 { return c.Rate }, func(c AuthCost) []float64 { return c.PairRate }},
		{fmt.Sprintf("replicas' CPU / order (≤ %.2f)", authCPUTarget), func(c AuthCost) float64 { return c.Replicas }, func(c AuthCost) []float64 { return c.PairReplicas }},
	} {
		vals := make(plotter.Values, len(a.Costs))
		var dots plotter.XYs
		for i, c := range a.Costs {
			vals[i] = part.pooled(c)
			top = max(top, vals[i])
			for _, r := range part.rounds(c) {
				dots = append(dots, plotter.XY{X: float64(i), Y: r})
				top = max(top, r)
			}
		}
		if err := bars(ratio, k, 2, vals, part.label, "%.2f"); err != nil {
			return err
		}
		if len(dots) > 0 { // a dot on the bar at each round's ratio
			text := make([]string, len(dots))
			for i := range text {
				text[i] = "•"
			}
			l, err := plotter.NewLabels(plotter.XYLabels{XYs: dots, Labels: text})
			if err != nil {
				return err
			}
			for i := range l.TextStyle {
				l.TextStyle[i].XAlign, l.TextStyle[i].YAlign, l.TextStyle[i].Font.Size = -0.5, -0.5, vg.Points(12)
			}
			l.Offset = vg.Point{X: width * (vg.Length(k) - 0.5)}
			ratio.Add(l)
		}
	}
	for i, t := range []float64{authRateTarget, authCPUTarget} {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: t}, {X: float64(len(a.Costs)) - 0.5, Y: t}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = palette[i%len(palette)], []vg.Length{vg.Points(4), vg.Points(3)}
		ratio.Add(l)
	}
	ratio.NominalX(names...)
	ratio.Y.Min, ratio.Y.Max = 0, top*1.35
	return savePanels(path, []*plot.Plot{rate, ratio})
}

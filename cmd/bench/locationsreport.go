package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const locationsHeading = "## Stock in several locations"

// LocationsResults are what the locations benchmark measured.
type LocationsResults struct {
	onOff
	// Quantity is the largest quantity of a line in the ABBA runs.
	Quantity int            `json:"max_quantity"`
	Runs     []LocationsRun `json:"runs"`
	// Sellout is the sell-out in three locations.
	Sellout *Run             `json:"sellout,omitempty"`
	Points  []LocationsPoint `json:"points"`
	Costs   []LocationsCost  `json:"costs"`
}

// LocationsRun is one run of one configuration.
type LocationsRun struct {
	Config string `json:"locations"` // one or three
	Round  int    `json:"round"`
	Run    Run    `json:"run"`
}

// LocationsPoint is one configuration on one workload, its runs pooled.
type LocationsPoint struct {
	Workload string `json:"workload"`
	Config   string `json:"locations"`
	// Rate is the runs' orders over their seconds; OrdersPerSec their median.
	Rate         float64 `json:"orders_per_s_pooled"`
	OrdersPerSec float64 `json:"orders_per_s"`
	// RunRates are each run's orders/s, in the rounds' order: the spread.
	RunRates    []float64 `json:"run_orders_per_s"`
	P99         float64   `json:"p99_ms"` // the runs' median
	FailedRatio float64   `json:"http_req_failed"`
	Split       int64     `json:"lines_split"` // every run's
	Oversold    int64     `json:"oversold_max"`
	Consistent  bool      `json:"consistent_all"`
	CPU         CPU       `json:"cpu_s_per_order"` // pooled
}

// spread is the runs' orders/s range as a share of their median: the
// run-to-run noise of the configuration.
func (p LocationsPoint) spread() float64 {
	if len(p.RunRates) < 2 {
		return 0
	}
	return (slices.Max(p.RunRates) - slices.Min(p.RunRates)) / max(median(p.RunRates), 1e-12)
}

// LocationsCost is one workload's three locations ÷ one.
type LocationsCost struct {
	Workload string  `json:"workload"`
	Rate     float64 `json:"orders_per_s_ratio"` // pooled orders/s
	Path     float64 `json:"path_ratio"`         // CPU per order: replicas, Redis and PostgreSQL
	Replicas float64 `json:"replicas_ratio"`     // the replicas' CPU per order
	// Each round's ratios, for the spread.
	PairRate []float64 `json:"pair_orders_per_s_ratios"`
	PairPath []float64 `json:"pair_path_ratios"`
}

// locationsPoints pools each configuration's runs per workload, and takes
// the ratios.
func locationsPoints(runs []LocationsRun, wls []Workload) ([]LocationsPoint, []LocationsCost) {
	var points []LocationsPoint
	var costs []LocationsCost
	for _, w := range wls {
		byCfg := map[string]LocationsPoint{}
		for _, cfg := range locationsConfigs {
			var rs []Run
			var rates []float64
			var split int64
			for _, r := range runs {
				if r.Run.Workload == w.Name && r.Config == cfg {
					rs, split = append(rs, r.Run), split+r.Run.Split
					rates = append(rates, float64(r.Run.Accepted)/max(r.Run.Seconds, 1e-9))
				}
			}
			pl, ok := pool(rs)
			if !ok {
				continue
			}
			p := LocationsPoint{Workload: w.Name, Config: cfg, Rate: pl.Rate, OrdersPerSec: pl.OrdersPerSec, RunRates: rates, P99: pl.P99,
				FailedRatio: pl.FailedRatio, Split: split, Oversold: pl.Oversold, Consistent: pl.Consistent, CPU: pl.CPU}
			byCfg[cfg] = p
			points = append(points, p)
		}
		one, ok1 := byCfg[locOne]
		three, ok2 := byCfg[locThree]
		if !ok1 || !ok2 {
			continue
		}
		pairs := roundPairs(runs, w.Name, locOne, locThree, func(r LocationsRun) (string, int, Run) { return r.Config, r.Round, r.Run })
		costs = append(costs, LocationsCost{Workload: w.Name, Rate: three.Rate / max(one.Rate, 1e-12),
			Path: authPath(three.CPU) / max(authPath(one.CPU), 1e-12), Replicas: three.CPU.Replicas / max(one.CPU.Replicas, 1e-12),
			PairRate: pairRatios(pairs, func(r Run) float64 { return float64(r.Accepted) / max(r.Seconds, 1e-9) }),
			PairPath: pairRatios(pairs, func(r Run) float64 { return authPath(r.CPU) / float64(r.Accepted) })})
	}
	return points, costs
}

func (l *LocationsResults) point(w, cfg string) (LocationsPoint, bool) {
	for _, p := range l.Points {
		if p.Workload == w && p.Config == cfg {
			return p, true
		}
	}
	return LocationsPoint{}, false
}

// oversold is the most any run and the sell-out oversold, and whether every
// audit found I1 holding (per location too).
func (l *LocationsResults) oversold() (int64, bool) {
	var over int64
	consistent := len(l.Runs) > 0 && l.Sellout != nil
	for _, r := range l.Runs {
		over, consistent = max(over, r.Run.Oversold), consistent && r.Run.Consistent
	}
	if l.Sellout != nil {
		over, consistent = max(over, l.Sellout.Oversold), consistent && l.Sellout.Consistent
	}
	return over, consistent
}

func locationsTitle(cfg string) string {
	if cfg == locOne {
		return "one location"
	}
	return "three locations"
}

// markdown writes the report's locations section.
func (l *LocationsResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\n", locationsHeading)
	fmt.Fprintf(w, "Measured by `%s` (profile %s) on %s, commit %s: the default strategy (%s), %d replicas behind the balancer, %d VUs, with the load generator of the strategies' runs but lines of 1 to %d units (so that a line can split), an Idempotency-Key on every order, no retries or cancels. Two configurations take turns in ABBA order (one then three, then three then one, ...), %d rounds, each run on emptied tables and new replicas after a %s warm-up and ANALYZE, each run %s: **one location**, the default alone (the bench deletes every other location before the replicas start: a deployment that never made one, which is every deployment before issue 41), and **three locations** (the load generator's `-locations 3`: `loadtest-2`, priority 10, and `loadtest-3`, priority 20, beside the default, priority 0, made by the bench in the database before the replicas start, as `POST /v1/locations` would; each SKU's stock spread over the three, the even SKUs, the hot one among them, with a single unit in the default, which allocation takes first, so that the first line of two units to reach it is split; every line allocated by the service, by priority). Lines split are those whose units a 201's allocations took from more than one location: with stock ample, a line splits only where a location runs short, so they are few. Orders/s are each configuration's orders over its runs' seconds (pooled), p99 the median of its runs'; CPU per order is the sum of the runs' CPU over the sum of their orders; PostgreSQL's CPU is the whole server's. The machine has %d cores shared by the replicas, the balancer, the generator, Redis, PostgreSQL and whatever else runs on it (%s): **read the ratios, not the absolute figures**.\n\n",
		l.Command, profileName(l.Command), l.When, l.Commit, l.Strategy, l.Replicas, l.VUs, l.Quantity, l.Repeats, l.Warmup, l.Duration,
		l.Cores, loadNote(l.Cores, l.LoadBefore, l.LoadAfter))
	fmt.Fprint(w, "| workload | locations | orders/s (each run's) | p99 | CPU µs / order: replicas + Redis + PostgreSQL = whole path | lines split | failed | audit |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range l.Costs {
		for _, cfg := range locationsConfigs {
			p, ok := l.point(c.Workload, cfg)
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.0f (%s) | %.0f ms | %.0f + %.0f + %.0f = **%.0f** | %d | %.2f%% | %d oversold, consistent: %v |\n",
				workloadTitle(c.Workload), locationsTitle(cfg), p.Rate, fmtRates(p.RunRates), p.P99, 1e6*p.CPU.Replicas, 1e6*p.CPU.Redis,
				1e6*p.CPU.Postgres, 1e6*authPath(p.CPU), p.Split, 100*p.FailedRatio, p.Oversold, p.Consistent)
		}
	}
	fmt.Fprint(w, "\n| workload | orders/s, three ÷ one (each round's) | whole path CPU / order, three ÷ one (each round's) | replicas' CPU / order | p99 one → three | one location's runs: spread of orders/s |\n|---|---:|---:|---:|---:|---:|\n")
	for _, c := range l.Costs {
		one, _ := l.point(c.Workload, locOne)
		three, _ := l.point(c.Workload, locThree)
		fmt.Fprintf(w, "| %s | **%.2f×** (%s) | **%.2f×** (%s) | %.2f× | %.0f → %.0f ms | ±%.0f%% |\n", workloadTitle(c.Workload), c.Rate,
			fmtRatios(c.PairRate), c.Path, fmtRatios(c.PairPath), c.Replicas, one.P99, three.P99, 50*one.spread())
	}
	for _, c := range l.Costs {
		spreadNote(w, workloadTitle(c.Workload)+", orders/s", c.PairRate, 1.2)
	}
	fmt.Fprintf(w, "\n![orders/s with one location and three, and their ratios](%s/locations.png)\n", out)
	if s := l.Sellout; s != nil {
		fmt.Fprintf(w, "\n**Sell-out in three locations** (%s, %d VUs, %s): lines of 1 to 3 units, 30%% naming a location at random, 20%% with `\"split\": false`, the rest allocated; %s orders placed, %s refused for stock, %d lines split; the load generator's audit (each SKU's counts per location from `GET /v1/skus/{sku}`: none negative, sold + reserved ≤ stocked, I1, the totals their sums; and `GET /v1/audit`): %d oversold, consistent: %v.\n",
			locationsSellout.Title, l.VUs, l.Duration, thousands(s.Accepted), thousands(s.Refused), s.Split, s.Oversold, s.Consistent)
	}
	fmt.Fprint(w, "\n### Issue 41: the locations' targets\n\n| what | target | this run | |\n|---|---:|---|---|\n")
	for _, c := range l.Costs {
		fmt.Fprintf(w, "| %s, %d VUs: orders/s with three locations (allocated lines, some split) ÷ one location | ≥ %.2f× | %.2f× (rounds %s) | %s |\n",
			workloadTitle(c.Workload), l.VUs, locationsRateTarget, c.Rate, fmtRatios(c.PairRate), mark(c.Rate >= locationsRateTarget))
	}
	over, consistent := l.oversold()
	fmt.Fprintf(w, "| oversold, every run and the sell-out, per location and in total | 0 | %d, consistent: %v | %s |\n", over, consistent,
		mark(over == 0 && consistent))
	var noise []string
	for _, c := range l.Costs {
		one, _ := l.point(c.Workload, locOne)
		noise = append(noise, fmt.Sprintf("%s %.0f orders/s, runs %s (±%.0f%%)", c.Workload, one.Rate, fmtRates(one.RunRates), 50*one.spread()))
	}
	fmt.Fprintf(w, "| no location made: orders/s as today's, within the run-to-run noise | the one-location runs are that deployment: their spread is the noise | %s | measured, not compared with an older build |\n",
		strings.Join(noise, "; "))
}

// fmtRates writes orders/s, whole.
func fmtRates(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(out, ", ")
}

func (l *LocationsResults) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\nstock in several locations on %s, %d VUs (%d ABBA rounds of %s; load average %.1f before, %.1f after, %d cores):\n",
		l.Strategy, l.VUs, l.Repeats, l.Duration, l.LoadBefore, l.LoadAfter, l.Cores)
	for _, p := range l.Points {
		fmt.Fprintf(w, "  %-5s %-5s orders %6.0f/s (runs %s, ±%.0f%%)  p99 %5.0f ms  CPU/order %4.0f µs  split %d  oversold %d consistent %v\n",
			p.Workload, p.Config, p.Rate, fmtRates(p.RunRates), 50*p.spread(), p.P99, 1e6*authPath(p.CPU), p.Split, p.Oversold, p.Consistent)
	}
	for _, c := range l.Costs {
		fmt.Fprintf(w, "  %-5s three ÷ one: orders/s %.2f× (rounds %s; target ≥ %.2f), CPU/order %.2f× (rounds %s)\n",
			c.Workload, c.Rate, fmtRatios(c.PairRate), locationsRateTarget, c.Path, fmtRatios(c.PairPath))
	}
	if s := l.Sellout; s != nil {
		fmt.Fprintf(w, "  sell-out in three locations: %d placed, %d refused, %d lines split, oversold %d, consistent %v\n",
			s.Accepted, s.Refused, s.Split, s.Oversold, s.Consistent)
	}
}

// writeOnly writes locations.json and locations.png, and replaces the
// section of the report in place (or adds it), leaving the rest as it was.
func (l *LocationsResults) writeOnly(o options) error {
	if err := l.writeFiles(o.out); err != nil {
		return err
	}
	return replaceSection(o, locationsHeading, l.markdown)
}

// writeFiles writes locations.json and locations.png into dir.
func (l *LocationsResults) writeFiles(dir string) error {
	return writeResults(dir, "locations", l, l.chart)
}

// chart draws locations.png: each workload's orders/s with one location and
// three, and the ratios with each round's and the target.
func (l *LocationsResults) chart(path string) error {
	if len(l.Costs) == 0 {
		return nil
	}
	names := make([]string, len(l.Costs))
	for i, c := range l.Costs {
		names[i] = workloadTitle(c.Workload)
	}
	width := vg.Points(22)
	bars := func(p *plot.Plot, k, of int, vals plotter.Values, label, format string) error {
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
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: text})
		if err != nil {
			return err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].XAlign, lb.TextStyle[i].Font.Size = -0.5, vg.Points(8)
		}
		lb.Offset = vg.Point{X: b.Offset, Y: vg.Points(2)}
		p.Add(lb)
		return nil
	}

	rate := plot.New()
	rate.Title.Text = fmt.Sprintf("%s, %d VUs: accepted orders/s", l.Strategy, l.VUs)
	rate.Y.Label.Text = "orders/s"
	rate.Add(plotter.NewGrid())
	rate.Legend.Top = true
	for k, cfg := range locationsConfigs {
		vals := make(plotter.Values, len(l.Costs))
		for i, c := range l.Costs {
			p, _ := l.point(c.Workload, cfg)
			vals[i] = p.Rate
		}
		if err := bars(rate, k, len(locationsConfigs), vals, locationsTitle(cfg), "%.0f"); err != nil {
			return err
		}
	}
	rate.NominalX(names...)
	rate.Y.Min = 0
	rate.Y.Max *= 1.35 // room for the legend
	rate.Y.Tick.Marker = wholeTicks{}

	ratio := plot.New()
	ratio.Title.Text = "three locations ÷ one (dots: each round's)"
	ratio.Y.Label.Text = "×"
	ratio.Add(plotter.NewGrid())
	ratio.Legend.Top = true
	top := 1.0
	for k, part := range []struct {
		label  string
		pooled func(LocationsCost) float64
		rounds func(LocationsCost) []float64
	}{
		{fmt.Sprintf("orders/s (≥ %.2f)", locationsRateTarget), func(c LocationsCost) float64 { return c.Rate }, func(c LocationsCost) []float64 { return c.PairRate }},
		{"CPU / order, whole path", func(c LocationsCost) float64 { return c.Path }, func(c LocationsCost) []float64 { return c.PairPath }},
	} {
		vals := make(plotter.Values, len(l.Costs))
		var dots plotter.XYs
		for i, c := range l.Costs {
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
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: dots, Labels: text})
			if err != nil {
				return err
			}
			for i := range lb.TextStyle {
				lb.TextStyle[i].XAlign, lb.TextStyle[i].YAlign, lb.TextStyle[i].Font.Size = -0.5, -0.5, vg.Points(12)
			}
			lb.Offset = vg.Point{X: width * (vg.Length(k) - 0.5)}
			ratio.Add(lb)
		}
	}
	target, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: locationsRateTarget}, {X: float64(len(l.Costs)) - 0.5, Y: locationsRateTarget}})
	if err != nil {
		return err
	}
	target.Color, target.Dashes = palette[0], []vg.Length{vg.Points(4), vg.Points(3)}
	ratio.Add(target)
	ratio.NominalX(names...)
	ratio.Y.Min, ratio.Y.Max = 0, top*1.35
	return savePanels(path, []*plot.Plot{rate, ratio})
}

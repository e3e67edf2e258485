package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const eventsHeading = "## Stock events"

// EventsResults are what the stock events benchmark measured.
type EventsResults struct {
	onOff
	NotRun  string         `json:"not_run,omitempty"` // why nothing was measured (no nats-server)
	Runs    []EventsRun    `json:"runs"`
	Points  []EventsPoint  `json:"points"`
	Costs   []EventsCost   `json:"costs"`
	CatchUp *CatchUpResult `json:"catch_up,omitempty"`
}

// EventsRun is one run of one configuration.
type EventsRun struct {
	Config string `json:"events"` // off or on
	Round  int    `json:"round"`
	Run    Run    `json:"run"`
	// Lag is the delivery lag histogram's observations over the run, summed
	// over the replicas (events on only).
	Lag       Histogram `json:"lag,omitzero"`
	Published int64     `json:"published"`
	Events    int64     `json:"events_in_outbox"` // warm-up and seeding included
}

// EventsPoint is one configuration on one workload: the medians of its runs.
type EventsPoint struct {
	Workload     string  `json:"workload"`
	Config       string  `json:"events"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P99          float64 `json:"p99_ms"`
	FailedRatio  float64 `json:"http_req_failed"`
	Oversold     int64   `json:"oversold_max"`
	Consistent   bool    `json:"consistent_all"`
	// CPU is the CPU seconds per accepted order over all the runs (the sum of
	// their CPU over the sum of their orders), by part; NATS's own is in
	// LockService.
	CPU CPU `json:"cpu_s_per_order"`
}

// Path is the whole order path's CPU per order: replicas, Redis and
// PostgreSQL (NATS apart).
func (p EventsPoint) Path() float64 { return p.CPU.Replicas + p.CPU.Redis + p.CPU.Postgres }

// EventsCost is one workload's events on ÷ off and the delivery lag.
type EventsCost struct {
	Workload string  `json:"workload"`
	Path     float64 `json:"path_ratio"`     // whole path CPU per order, on ÷ off
	Replicas float64 `json:"replicas_ratio"` // replicas' CPU per order, on ÷ off
	// PairPath are each round's whole-path ratio, for the spread.
	PairPath []float64 `json:"pair_path_ratios"`
	// Lag is the on runs' histograms summed; LagP50 and LagP99 its
	// quantiles (s), NaN-free: -1 when nothing was observed.
	Lag    Histogram `json:"lag"`
	LagP50 float64   `json:"lag_p50_s"`
	LagP99 float64   `json:"lag_p99_s"`
}

// CatchUpResult is the catch-up run: NATS down for DownS with the load on.
type CatchUpResult struct {
	Workload    string  `json:"workload"`
	VUs         int     `json:"vus"`
	DownS       float64 `json:"down_s"`        // as planned
	DownActualS float64 `json:"down_actual_s"` // the stop to the restarted server answering
	WaitS       float64 `json:"wait_bound_s"`
	PollS       float64 `json:"poll_s"`
	StopAtS     float64 `json:"stop_at_s"` // from the load's start
	RestartAtS  float64 `json:"restart_at_s"`
	BeforeS     float64 `json:"before_window_s"`
	// Orders/s: before the stop, while NATS was down, from the restart to the
	// catch-up, and after it.
	Before   float64          `json:"orders_per_s_before"`
	During   float64          `json:"orders_per_s_down"`
	Catching float64          `json:"orders_per_s_catching_up"`
	After    float64          `json:"orders_per_s_after"`
	Failed   int64            `json:"failed"`
	FailedBy map[string]int64 `json:"failed_by,omitempty"`
	// Steady is the highest backlog the database had in the window before
	// the stop; caught up is the first reading at most that after the restart.
	Steady      int64   `json:"steady_backlog"`
	PeakDB      int64   `json:"backlog_peak"`
	PeakGauge   float64 `json:"gauge_peak"`
	PeakOldestS float64 `json:"oldest_peak_s"`
	CaughtUp    bool    `json:"caught_up"`
	CatchUpS    float64 `json:"catch_up_s"` // from the restart
	// Drained says the backlog reached 0 once the load stopped, before the
	// stream was counted.
	Drained        bool            `json:"drained"`
	OutboxEvents   int64           `json:"outbox_events"`
	StreamMessages int64           `json:"stream_messages"`
	Oversold       int64           `json:"oversold"`
	Consistent     bool            `json:"consistent"`
	Samples        []BacklogSample `json:"samples"`
	// Timeline is orders/s per TimelineStep from the load's start.
	Timeline     []float64 `json:"timeline"`
	TimelineStep float64   `json:"timeline_step_s"`
}

// StreamComplete says the stream holds at least every event of the outbox.
func (c *CatchUpResult) StreamComplete() bool {
	return c.OutboxEvents > 0 && c.StreamMessages >= c.OutboxEvents
}

// BacklogSample is one reading of the backlog: from the database, and the
// replicas' gauges (the leader's, refreshed by it every second).
type BacklogSample struct {
	T       float64 `json:"t_s"` // from the load's start
	DB      int64   `json:"db"`
	Gauge   float64 `json:"gauge"`
	OldestS float64 `json:"oldest_s"`
}

// eventPoints takes each configuration's medians per workload, and the
// ratios and lag per workload.
func eventPoints(runs []EventsRun, wls []Workload) ([]EventsPoint, []EventsCost) {
	var points []EventsPoint
	var costs []EventsCost
	for _, w := range wls {
		byCfg := map[string]EventsPoint{}
		for _, cfg := range eventConfigs {
			var rs []Run
			for _, r := range runs {
				if r.Run.Workload == w.Name && r.Config == cfg {
					rs = append(rs, r.Run)
				}
			}
			pl, ok := pool(rs)
			if !ok {
				continue
			}
			p := EventsPoint{Workload: w.Name, Config: cfg, OrdersPerSec: pl.OrdersPerSec, P99: pl.P99, FailedRatio: pl.FailedRatio,
				Oversold: pl.Oversold, Consistent: pl.Consistent, CPU: pl.CPU}
			byCfg[cfg] = p
			points = append(points, p)
		}
		off, ok1 := byCfg[eventsOff]
		on, ok2 := byCfg[eventsOn]
		if !ok1 || !ok2 {
			continue
		}
		c := EventsCost{Workload: w.Name, Path: on.Path() / max(off.Path(), 1e-12),
			Replicas: on.CPU.Replicas / max(off.CPU.Replicas, 1e-12)}
		for _, r := range runs {
			if r.Run.Workload == w.Name && r.Config == eventsOn {
				c.Lag = c.Lag.add(r.Lag)
			}
		}
		pairs := roundPairs(runs, w.Name, eventsOff, eventsOn, func(r EventsRun) (string, int, Run) { return r.Config, r.Round, r.Run })
		c.PairPath = pairRatios(pairs, func(r Run) float64 {
			return (r.CPU.Replicas + r.CPU.Redis + r.CPU.Postgres) / float64(r.Accepted)
		})
		c.LagP50, c.LagP99 = orMinus(c.Lag.Quantile(0.5)), orMinus(c.Lag.Quantile(0.99))
		costs = append(costs, c)
	}
	return points, costs
}

func orMinus(x float64) float64 {
	if math.IsNaN(x) {
		return -1
	}
	return x
}

// fmtLag is a lag in ms, or a dash.
func fmtLag(s float64) string {
	if s < 0 {
		return notMeasured
	}
	if s < 0.1 {
		return fmt.Sprintf("%.1f ms", 1e3*s)
	}
	return fmt.Sprintf("%.0f ms", 1e3*s)
}

func (e *EventsResults) point(w, cfg string) (EventsPoint, bool) {
	for _, p := range e.Points {
		if p.Workload == w && p.Config == cfg {
			return p, true
		}
	}
	return EventsPoint{}, false
}

// markdown writes the report's Stock events section.
func (e *EventsResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\n", eventsHeading)
	if e.NotRun != "" {
		fmt.Fprintf(w, "Not run by `%s` on %s: %s.\n", e.Command, e.When, mdEscape(e.NotRun))
		return
	}
	fmt.Fprintf(w, "Measured by `%s` (profile %s) on %s, commit %s: the default strategy (%s), %d replicas behind the balancer, %d VUs, with the load generator of the strategies' runs (quantity 1, an Idempotency-Key on every order). Two configurations take turns in ABBA order (off then on, then on then off, ...), %d rounds, each run on emptied tables and new replicas after a %s warm-up and ANALYZE, each run %s: **events off** (`--events=false`: no event written, no relay) and **events on** (an event row per counter change in the change's transaction, and the relay's leader publishing them to NATS JetStream with `--nats-url`, a private `nats-server -js` the bench starts on loopback with its store in a temporary folder). Orders/s and p99 are the medians of the runs; CPU per order is the sum of the runs' CPU over the sum of their orders, as in the cost table above, the whole path being the replicas, Redis and PostgreSQL; NATS's own CPU is apart. The machine has %d cores shared by the replicas, the balancer, the generator, Redis, PostgreSQL, NATS and whatever else runs on it (%s): **read the ratios, not the absolute figures**.\n\n",
		e.Command, profileName(e.Command), e.When, e.Commit, e.Strategy, e.Replicas, e.VUs, e.Repeats, e.Warmup, e.Duration, e.Cores, loadNote(e.Cores, e.LoadBefore, e.LoadAfter))
	fmt.Fprint(w, "| workload | events | orders/s | p99 | CPU µs / order: replicas + Redis + PostgreSQL = whole path | NATS CPU µs / order | failed | audit |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range e.Costs {
		for _, cfg := range eventConfigs {
			p, ok := e.point(c.Workload, cfg)
			if !ok {
				continue
			}
			nats := notMeasured
			if cfg == eventsOn {
				nats = fmt.Sprintf("%.0f", 1e6*p.CPU.LockService)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f ms | %.0f + %.0f + %.0f = **%.0f** | %s | %.2f%% | %d oversold, consistent: %v |\n",
				workloadTitle(c.Workload), cfg, p.OrdersPerSec, p.P99, 1e6*p.CPU.Replicas, 1e6*p.CPU.Redis, 1e6*p.CPU.Postgres, 1e6*p.Path(),
				nats, 100*p.FailedRatio, p.Oversold, p.Consistent)
		}
	}
	fmt.Fprint(w, "\n| workload | whole path CPU / order, on ÷ off (each round's) | replicas' CPU / order, on ÷ off | orders/s, on ÷ off | delivery lag p50 / p99 (observations) |\n|---|---:|---:|---:|---:|\n")
	for _, c := range e.Costs {
		off, _ := e.point(c.Workload, eventsOff)
		on, _ := e.point(c.Workload, eventsOn)
		fmt.Fprintf(w, "| %s | **%.2f×** (%s) | %.2f× | %.2f× | %s / %s (%.0f) |\n", workloadTitle(c.Workload), c.Path, fmtRatios(c.PairPath), c.Replicas,
			on.OrdersPerSec/max(off.OrdersPerSec, 1e-9), fmtLag(c.LagP50), fmtLag(c.LagP99), c.Lag.Count)
	}
	for _, c := range e.Costs {
		spreadNote(w, workloadTitle(c.Workload), c.PairPath, 1.5)
	}
	fmt.Fprintf(w, "\nThe delivery lag is `stockguard_events_delivery_lag_seconds{destination=\"nats\"}`, observed by the relay's leader from each event's commit (the database's clock) to JetStream's acknowledgement of its publish: its buckets read from every replica's `/metrics` before and after each run with events on, the differences summed over the replicas and the rounds, and the quantiles interpolated linearly within the bucket they fall in, as Prometheus's `histogram_quantile` does (the buckets' bounds: %s s), so a quantile is only as fine as its bucket. The replicas run with the relay's defaults: a round that found less than a full batch (500 events) waits `--relay-interval` (100 ms) before the next, so an event committed just after a round waits for the next one.\n",
		fmtBounds(e.lagBounds()))
	if cu := e.CatchUp; cu != nil {
		e.catchUpMarkdown(w, cu)
	}
	fmt.Fprintf(w, "\n![orders/s and the backlog through NATS's outage](%s/events.png)\n", out)
	fmt.Fprint(w, "\n### Issue 32: targets\n\n| what | target | this run | |\n|---|---:|---|---|\n")
	for _, c := range e.Costs {
		fmt.Fprintf(w, "| %s: CPU per order with events ÷ without, whole path (replicas, Redis, PostgreSQL) | ≤ %.2f× | %.2f× | %s |\n",
			workloadTitle(c.Workload), eventsTarget, c.Path, mark(c.Path > 0 && c.Path <= eventsTarget))
		fmt.Fprintf(w, "| %s: the same, the replicas' CPU alone (the relay's leader among them) | ≤ %.2f× | %.2f× | %s |\n",
			workloadTitle(c.Workload), eventsTarget, c.Replicas, mark(c.Replicas > 0 && c.Replicas <= eventsTarget))
	}
	for _, c := range e.Costs {
		fmt.Fprintf(w, "| %s, %d VUs: delivery lag, commit → JetStream ack, p50 / p99 | report | %s / %s | |\n",
			workloadTitle(c.Workload), e.VUs, fmtLag(c.LagP50), fmtLag(c.LagP99))
	}
	if cu := e.CatchUp; cu != nil {
		now := fmt.Sprintf("%.1f s after NATS was back (backlog peak %s events)", cu.CatchUpS, thousands(cu.PeakDB))
		if !cu.CaughtUp {
			now = fmt.Sprintf("**not caught up within %.0f s** (backlog peak %s events)", cu.WaitS, thousands(cu.PeakDB))
		}
		fmt.Fprintf(w, "| catch-up after NATS down %.0f s (%s, %d VUs) | report | %s | |\n", cu.DownS, workloadTitle(cu.Workload), cu.VUs, now)
		fmt.Fprintf(w, "| orders accepted while NATS is down | > 0 | %.0f/s (%.0f/s before) | %s |\n", cu.During, cu.Before, mark(cu.During > 0))
		fmt.Fprintf(w, "| the stream holds every event of the outbox | ≥ outbox | %s of %s | %s |\n",
			thousands(cu.StreamMessages), thousands(cu.OutboxEvents), mark(cu.StreamComplete()))
	}
}

// catchUpMarkdown writes the catch-up run's paragraph and table.
func (e *EventsResults) catchUpMarkdown(w io.Writer, cu *CatchUpResult) {
	fmt.Fprintf(w, "\n**NATS down for %.0f s.** On %s at %d VUs, events on, new replicas and a new private NATS (its stream empty): after a %s warm-up the bench's own client orders throughout; %.0f s in, the bench stops nats-server (SIGTERM: the server closes its connections and goes), starts it again %.0f s later on the same port and store (%.1f s from the stop to the restarted server answering), and waits up to %.0f s for the relay to catch up. The backlog is read every %s from the database (the events not yet in the feed, and those after the stream's cursor: what the relay's `EventBacklog` counts) and from the replicas' `stockguard_events_backlog` (the leader's, refreshed by it once a second); **caught up** is the first reading after the restart at most the highest of the window before the stop (%s events: under load the newest events always wait for the relay's next round). Then the load stops, the backlog drains to 0, and the stream's message count (its info, through `internal/jetstream`) is compared with the outbox's events.\n\n",
		cu.DownS, workloadTitle(cu.Workload), cu.VUs, e.Warmup, cu.StopAtS, cu.DownS, cu.DownActualS, cu.WaitS, time.Duration(cu.PollS*float64(time.Second)), thousands(cu.Steady))
	caught := fmt.Sprintf("%.1f s", cu.CatchUpS)
	if !cu.CaughtUp {
		caught = fmt.Sprintf("**not within %.0f s**", cu.WaitS)
	}
	fmt.Fprint(w, "| orders/s before (window) | while NATS is down | from its restart to the catch-up | after | failed | backlog peak: database / gauge | oldest event's age, peak | catch-up after the restart | drained to 0 | stream / outbox | audit |\n|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n")
	fmt.Fprintf(w, "| %.0f (%.1f s) | %.0f | %.0f | %.0f | %s | %s / %s | %.1f s | %s | %v | %s / %s | %d oversold, consistent: %v |\n",
		cu.Before, cu.BeforeS, cu.During, cu.Catching, cu.After, failures(cu.Failed, cu.FailedBy), thousands(cu.PeakDB), thousands(int64(cu.PeakGauge)),
		cu.PeakOldestS, caught, cu.Drained, thousands(cu.StreamMessages), thousands(cu.OutboxEvents), cu.Oversold, cu.Consistent)
}

// lagBounds are the lag histogram's bucket bounds, from any run.
func (e *EventsResults) lagBounds() []float64 {
	for _, c := range e.Costs {
		if len(c.Lag.Bounds) > 0 {
			return c.Lag.Bounds
		}
	}
	return nil
}

func fmtBounds(bs []float64) string {
	if len(bs) == 0 {
		return notMeasured
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = fmt.Sprintf("%g", b)
	}
	return strings.Join(parts, ", ")
}

func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

func (e *EventsResults) printSummary(w io.Writer) {
	if e.NotRun != "" {
		fmt.Fprintf(w, "\nstock events: not run: %s\n", e.NotRun)
		return
	}
	fmt.Fprintf(w, "\nstock events on %s, %d VUs (%d ABBA rounds of %s; load average %.1f before, %.1f after, %d cores):\n",
		e.Strategy, e.VUs, e.Repeats, e.Duration, e.LoadBefore, e.LoadAfter, e.Cores)
	for _, p := range e.Points {
		fmt.Fprintf(w, "  %-5s events %-3s orders %6.0f/s  p99 %5.0f ms  CPU/order %4.0f µs (replicas %4.0f)  oversold %d consistent %v\n",
			p.Workload, p.Config, p.OrdersPerSec, p.P99, 1e6*p.Path(), 1e6*p.CPU.Replicas, p.Oversold, p.Consistent)
	}
	for _, c := range e.Costs {
		fmt.Fprintf(w, "  %-5s on ÷ off: whole path %.2f× (rounds %s), replicas %.2f×; lag p50 %s, p99 %s\n",
			c.Workload, c.Path, fmtRatios(c.PairPath), c.Replicas, fmtLag(c.LagP50), fmtLag(c.LagP99))
	}
	if cu := e.CatchUp; cu != nil {
		fmt.Fprintf(w, "  catch-up: NATS down %.1f s; orders/s before %.0f, down %.0f, catching up %.0f, after %.0f; backlog peak %d (gauge %.0f); caught up %v in %.1f s; stream %d of %d events; oversold %d consistent %v\n",
			cu.DownActualS, cu.Before, cu.During, cu.Catching, cu.After, cu.PeakDB, cu.PeakGauge, cu.CaughtUp, cu.CatchUpS,
			cu.StreamMessages, cu.OutboxEvents, cu.Oversold, cu.Consistent)
	}
}

// writeOnly writes events.json and events.png, and replaces the Stock events
// section of the report in place (or adds it), leaving the rest as it was.
func (e *EventsResults) writeOnly(o options) error {
	if err := e.writeFiles(o.out); err != nil {
		return err
	}
	return replaceSection(o, eventsHeading, e.markdown)
}

// writeFiles writes events.json and events.png into dir.
func (e *EventsResults) writeFiles(dir string) error { return writeResults(dir, "events", e, e.chart) }

// chart draws events.png: orders/s and the backlog through the catch-up run,
// the stop, the restart and the catch-up marked.
func (e *EventsResults) chart(path string) error {
	cu := e.CatchUp
	if cu == nil || len(cu.Samples) == 0 {
		return nil
	}
	var panels []*plot.Plot
	marks := []struct {
		label string
		x     float64
	}{{"NATS stopped", cu.StopAtS}, {"NATS back", cu.RestartAtS}}
	if cu.CaughtUp {
		marks = append(marks, struct {
			label string
			x     float64
		}{fmt.Sprintf("caught up (%.1fs)", cu.CatchUpS), cu.RestartAtS + cu.CatchUpS})
	}
	panel := func(title, ylabel string, lines []struct {
		label string
		xys   plotter.XYs
	}) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "s from the load's start"
		p.Y.Label.Text = ylabel
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		top := 1.0
		for i, l := range lines {
			line, err := plotter.NewLine(l.xys)
			if err != nil {
				return nil, err
			}
			line.Color, line.Width = palette[i%len(palette)], vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(l.label, line)
			for _, xy := range l.xys {
				top = max(top, xy.Y)
			}
		}
		for i, m := range marks {
			v, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: 0}, {X: m.x, Y: top * 1.1}})
			if err != nil {
				return nil, err
			}
			v.Color = palette[(i+2)%len(palette)] // the same mark, the same color, in both panels
			v.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(v)
			p.Legend.Add(m.label, v)
		}
		p.Y.Min, p.Y.Max = 0, top*1.5 // room for the legend
		p.Y.Tick.Marker = wholeTicks{}
		p.X.Tick.Marker = everyTicks(5)
		return p, nil
	}
	orders := make(plotter.XYs, len(cu.Timeline))
	for i, v := range cu.Timeline {
		orders[i] = plotter.XY{X: (float64(i) + 0.5) * cu.TimelineStep, Y: v}
	}
	p, err := panel(fmt.Sprintf("%s, %d VUs: orders/s through NATS's outage", workloadTitle(cu.Workload), cu.VUs), "orders/s",
		[]struct {
			label string
			xys   plotter.XYs
		}{{fmt.Sprintf("orders/s per %.2gs", cu.TimelineStep), orders}})
	if err != nil {
		return err
	}
	panels = append(panels, p)
	db, gauge := make(plotter.XYs, len(cu.Samples)), make(plotter.XYs, len(cu.Samples))
	for i, s := range cu.Samples {
		db[i], gauge[i] = plotter.XY{X: s.T, Y: float64(s.DB)}, plotter.XY{X: s.T, Y: s.Gauge}
	}
	q, err := panel("the events' backlog", "events", []struct {
		label string
		xys   plotter.XYs
	}{{"in the database", db}, {"stockguard_events_backlog (leader)", gauge}})
	if err != nil {
		return err
	}
	panels = append(panels, q)
	return savePanels(path, slices.Clip(panels))
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const soakHeading = "## Soak"

// soakTarget is the issue's: the last step's orders/s at least this share of
// the first's, on each workload.
const soakTarget = 0.9

// SoakResults are what the soak measured.
type SoakResults struct {
	Command    string  `json:"command"`
	When       string  `json:"when"`
	Commit     string  `json:"commit"`
	Strategy   string  `json:"strategy"`
	Replicas   int     `json:"replicas"`
	VUs        int     `json:"vus"`
	Orders     int64   `json:"orders"` // the soak's goal: orders in the database
	Step       int64   `json:"step"`
	Cores      int     `json:"cores"`
	PostgreSQL string  `json:"postgresql"`
	Fsync      string  `json:"fsync"`
	Autovacuum string  `json:"autovacuum"` // the server's settings, as they were
	Seconds    float64 `json:"duration_s"`
	TimedOut   bool    `json:"timed_out"`
	// Counted is SELECT COUNT(*) FROM orders at the end: the chunks' accepted
	// orders add up to it when every order accepted was written once.
	Counted int64       `json:"orders_counted"`
	Chunks  []SoakChunk `json:"chunks"`
	// Fresh are the control: a chunk of each workload on emptied tables and
	// new replicas right after the soak (none when it stopped at the deadline).
	Fresh   []SoakChunk  `json:"fresh"`
	Steps   []SoakStep   `json:"steps"`
	Targets []SoakTarget `json:"targets"`
	Tables  []SoakTable  `json:"tables"`
	// Checkout is the checkout soak (nil in a soak.json from before it, or
	// with -soak-holds 0).
	Checkout *CheckoutSoak `json:"checkout,omitempty"`
}

// SoakChunk is one load generator run: From and To are the orders in the
// database before and after it.
type SoakChunk struct {
	Workload     string  `json:"workload"`
	From         int64   `json:"from_orders"`
	To           int64   `json:"to_orders"`
	Accepted     int64   `json:"orders_accepted"`
	Seconds      float64 `json:"duration_s"` // of load
	WallS        float64 `json:"wall_s"`     // the load generator's whole run: its set-up and audit too
	OrdersPerSec float64 `json:"orders_per_s"`
	P99          float64 `json:"p99_ms"`
	FailedRatio  float64 `json:"http_req_failed"`
	Oversold     int64   `json:"oversold"`
	Consistent   bool    `json:"consistent"`
	Unsettled    int64   `json:"orders_unsettled"`
	Load         float64 `json:"load_average"` // the machine's one-minute load average at the chunk's end
}

// SoakStep is one step of orders in the database, [From, To): each workload's
// rate over the chunks that placed them.
type SoakStep struct {
	From  int64      `json:"from_orders"`
	To    int64      `json:"to_orders"`
	Full  bool       `json:"full"` // a whole step (the last may be cut short by the deadline)
	Rates []SoakRate `json:"rates"`
	Load  float64    `json:"load_average"` // the chunks' load averages, weighted by their orders in the step
}

// SoakRate is one workload's share of a step: the step's orders it placed, the
// seconds of load they took, and the chunks' p99 weighted by those orders.
type SoakRate struct {
	Workload     string  `json:"workload"`
	Orders       float64 `json:"orders"`
	Seconds      float64 `json:"seconds"`
	OrdersPerSec float64 `json:"orders_per_s"`
	P99          float64 `json:"p99_ms"`
}

// SoakTarget is the target on one workload: its last full step against its first.
type SoakTarget struct {
	Workload  string  `json:"workload"`
	First     float64 `json:"first_orders_per_s"`
	Last      float64 `json:"last_orders_per_s"`
	FirstP99  float64 `json:"first_p99_ms"`
	LastP99   float64 `json:"last_p99_ms"`
	LastStep  int64   `json:"last_step_to"`
	Ratio     float64 `json:"last_to_first"`
	Pass      bool    `json:"pass"`
	Reason    string  `json:"reason,omitempty"` // why it could not pass, beyond the ratio
	P99Growth float64 `json:"p99_last_to_first"`
	// The control's orders/s on fresh tables right after the soak, and the
	// last step's against it (0 without a control).
	Fresh      float64 `json:"fresh_orders_per_s"`
	FreshRatio float64 `json:"last_to_fresh"`
}

// SoakTable is one table at the end of the soak; the counters are over the soak.
type SoakTable struct {
	Name         string `json:"name"`
	Rows         int64  `json:"rows"`
	Bytes        int64  `json:"bytes"`
	Autovacuums  int64  `json:"autovacuums"`
	Autoanalyzes int64  `json:"autoanalyzes"`
	Manual       int64  `json:"manual_analyzes_and_vacuums"`
	SeqScans     int64  `json:"seq_scans"`
}

// soakSteps cuts the orders [0, min(goal, reached)) into steps and gives each
// workload's rate in each: a chunk's orders are spread evenly over its orders
// in the database, so a chunk that straddles two steps counts in each, with
// its seconds shared in proportion.
func soakSteps(chunks []SoakChunk, step, goal int64, wls []string) []SoakStep {
	if step <= 0 || len(chunks) == 0 {
		return nil
	}
	end := min(goal, chunks[len(chunks)-1].To)
	var out []SoakStep
	for lo := int64(0); lo < end; lo += step {
		hi := min(lo+step, end)
		s := SoakStep{From: lo, To: hi, Full: hi-lo == step}
		var load float64
		for _, w := range wls {
			r := SoakRate{Workload: w}
			var p99 float64
			for _, c := range chunks {
				if c.Workload != w || c.Accepted == 0 {
					continue
				}
				in := min(c.To, hi) - max(c.From, lo)
				if in <= 0 {
					continue
				}
				share := float64(in) / float64(c.Accepted)
				r.Orders += float64(in)
				r.Seconds += share * c.Seconds
				p99 += float64(in) * c.P99
				load += float64(in) * c.Load
			}
			if r.Seconds > 0 {
				r.OrdersPerSec, r.P99 = r.Orders/r.Seconds, p99/r.Orders
			}
			s.Rates = append(s.Rates, r)
		}
		s.Load = load / float64(hi-lo)
		out = append(out, s)
	}
	return out
}

func (s SoakStep) rate(w string) SoakRate {
	for _, r := range s.Rates {
		if r.Workload == w {
			return r
		}
	}
	return SoakRate{Workload: w}
}

// judge sets the targets: each workload's last full step against its first.
func (s *SoakResults) judge() {
	s.Targets = nil
	var full []SoakStep
	for _, st := range s.Steps {
		if st.Full {
			full = append(full, st)
		}
	}
	for _, w := range soakWorkloads {
		t := SoakTarget{Workload: w}
		switch {
		case len(full) < 2:
			t.Reason = fmt.Sprintf("%d whole step(s) of %d orders: nothing to compare", len(full), s.Step)
		default:
			first, last := full[0].rate(w), full[len(full)-1].rate(w)
			t.First, t.Last, t.FirstP99, t.LastP99 = first.OrdersPerSec, last.OrdersPerSec, first.P99, last.P99
			t.LastStep = full[len(full)-1].To
			if first.OrdersPerSec > 0 {
				t.Ratio = last.OrdersPerSec / first.OrdersPerSec
			}
			if first.P99 > 0 {
				t.P99Growth = last.P99 / first.P99
			}
			t.Pass = t.Ratio >= soakTarget && first.Seconds > 0 && last.Seconds > 0
			if first.Seconds == 0 || last.Seconds == 0 {
				t.Reason = "no chunk of it in the first or the last step"
			}
		}
		for _, f := range s.Fresh {
			if f.Workload == w {
				t.Fresh = f.OrdersPerSec
				if f.OrdersPerSec > 0 {
					t.FreshRatio = t.Last / f.OrdersPerSec
				}
			}
		}
		if s.TimedOut {
			t.Pass = false
			t.Reason = strings.TrimPrefix(t.Reason+"; ", "; ") +
				fmt.Sprintf("the soak reached %s of %s orders (stopped at the deadline)", thousands(s.reached()), thousands(s.Orders))
		}
		s.Targets = append(s.Targets, t)
	}
}

// audits sums the chunks' audits; failed is the largest share of failed
// requests of a chunk.
func (s *SoakResults) audits() (oversold, unsettled int64, consistent bool, failed float64) {
	consistent = true
	for _, c := range s.Chunks {
		oversold += c.Oversold
		unsettled += c.Unsettled
		consistent = consistent && c.Consistent
		failed = max(failed, c.FailedRatio)
	}
	return oversold, unsettled, consistent, failed
}

func (s *SoakResults) reached() int64 {
	if len(s.Chunks) == 0 {
		return 0
	}
	return s.Chunks[len(s.Chunks)-1].To
}

// overheads are the load generator's set-up and audit of the first and the
// last chunk, in seconds.
func (s *SoakResults) overheads() (first, last float64) {
	if len(s.Chunks) == 0 {
		return 0, 0
	}
	a, b := s.Chunks[0], s.Chunks[len(s.Chunks)-1]
	return a.WallS - a.Seconds, b.WallS - b.Seconds
}

// markdown writes the report's Soak section.
func (s *SoakResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\nMeasured by `%s` on %s, commit %s: the default strategy (%s), %d replicas behind the balancer, %d VUs, on one emptied database "+
		"that the benchmark never analyses; autovacuum as the server has it (%s). The load generator runs in chunks that alternate the hot SKU and zipf "+
		"(each chunk one run of its own, with new SKUs seeded and its audit at the end, sized to about half a step of orders at its workload's last rate, "+
		"%s to %s) until the orders table holds %s orders: %d chunks in %.1f min. A step's orders/s are its orders over the seconds of load that placed them "+
		"(a chunk that straddles two steps counts in each, pro rata); its p99 is the chunks' p99s weighted by their orders in the step. "+
		"The machine's %d cores are shared with everything else running on it, PostgreSQL %s with fsync %s.\n\n",
		soakHeading, s.Command, s.When, s.Commit, s.Strategy, s.Replicas, s.VUs, s.Autovacuum, soakMinChunk, soakMaxChunk,
		thousands(s.Orders), len(s.Chunks), s.Seconds/60, s.Cores, s.PostgreSQL, s.Fsync)
	if strings.HasPrefix(s.Autovacuum, "autovacuum off") {
		fmt.Fprint(w, "Autovacuum is off on this server: no table was analysed or vacuumed during the soak, and every plan was made without statistics.\n\n")
	}
	fmt.Fprintf(w, "**Target: the last %s orders at least %.0f%% of the first %s's orders/s.**\n\n", thousands(s.Step), soakTarget*100, thousands(s.Step))
	fmt.Fprint(w, "| workload | first step | last step | last / first | p99 first → last | | fresh tables after | last / fresh |\n|---|---:|---:|---:|---:|---|---:|---:|\n")
	for _, t := range s.Targets {
		mark := "pass"
		if !t.Pass {
			mark = "**miss**"
			if t.Reason != "" {
				mark += ": " + t.Reason
			}
		}
		fresh, ratio := "–", "–"
		if t.Fresh > 0 {
			fresh, ratio = fmt.Sprintf("%.0f orders/s", t.Fresh), fmt.Sprintf("%.2f", t.FreshRatio)
		}
		fmt.Fprintf(w, "| %s | %.0f orders/s | %.0f orders/s | %.2f | %.0f → %.0f ms | %s | %s | %s |\n", t.Workload, t.First, t.Last, t.Ratio,
			t.FirstP99, t.LastP99, mark, fresh, ratio)
	}
	fmt.Fprint(w, "\nThe machine is shared, and its load moves the rates over a soak of minutes: the control, one chunk of each workload on emptied "+
		"tables and new replicas right after the last step (so under the same load), tells history's share of a decay (last / fresh) from the machine's. "+
		"The load average is the machine's one-minute figure at the chunks' ends.\n")
	fmt.Fprint(w, "\n| orders in the database |")
	for _, wl := range soakWorkloads {
		fmt.Fprintf(w, " %s orders/s | %s p99 |", wl, wl)
	}
	fmt.Fprint(w, " load average |\n|---|")
	for range soakWorkloads {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprint(w, "---:|")
	fmt.Fprintln(w)
	for _, st := range s.Steps {
		span := thousands(st.From) + " – " + thousands(st.To)
		if !st.Full {
			span += " (part)"
		}
		fmt.Fprintf(w, "| %s |", span)
		for _, wl := range soakWorkloads {
			r := st.rate(wl)
			if r.Seconds == 0 {
				fmt.Fprint(w, " – | – |")
				continue
			}
			fmt.Fprintf(w, " %.0f | %.0f ms |", r.OrdersPerSec, r.P99)
		}
		fmt.Fprintf(w, " %.1f |\n", st.Load)
	}
	fmt.Fprintf(w, "\n![orders/s and p99 against the orders in the database, per workload](%s/soak.png)\n\n", out)

	oversold, unsettled, consistent, failed := s.audits()
	first, last := s.overheads()
	fmt.Fprintf(w, "Every chunk's audit: %d oversold, %d orders unsettled, consistent: %v; at most %.2f%% of a chunk's requests failed. "+
		"Orders counted in the table at the end: %s (the chunks' accepted orders add up to %s). "+
		"The load generator's set-up and audit (seeding its new SKUs, settling, reading each SKU back) took %.1fs in the first chunk and %.1fs in the last: "+
		"they read the run's own SKUs, one row each, not the history.\n\n",
		oversold, unsettled, consistent, failed*100, thousands(s.Counted), thousands(s.reached()), first, last)
	if d := s.Counted - s.reached(); d > 0 {
		fmt.Fprintf(w, "The %s orders more in the table are orders whose answer the load generator lost (among the failed requests) "+
			"and settled afterwards by replaying their key: placed, counted sold by its audit, not accepted; the steps count the accepted.\n\n", thousands(d))
	}
	if len(s.Tables) > 0 {
		fmt.Fprint(w, "| table at the end | live rows (as last reported) | size | autovacuums | autoanalyzes | ANALYZE or VACUUM by hand | sequential scans |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range s.Tables {
			fmt.Fprintf(w, "| `%s` | %s | %s | %d | %d | %d | %d |\n", t.Name, thousands(t.Rows), fmtMiB(t.Bytes), t.Autovacuums, t.Autoanalyzes, t.Manual, t.SeqScans)
		}
		fmt.Fprint(w, "\nThe counters are over the soak, from PostgreSQL's statistics (`pg_stat_user_tables`, as the sessions last reported them): "+
			"a sequential scan of a big table on the order path would show here and in the curve; `internal/gormstore`'s plan test checks every "+
			"query of the order path for an index on tables of 100,000 rows never analysed.\n")
	}
	if s.Checkout != nil {
		fmt.Fprintln(w)
		s.Checkout.markdown(w, out)
	}
}

func (s *SoakResults) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\nsoak on %s, %d VUs: %s orders in %d chunks, %.1f min (timed out: %v)\n", s.Strategy, s.VUs, thousands(s.reached()), len(s.Chunks),
		s.Seconds/60, s.TimedOut)
	for _, st := range s.Steps {
		fmt.Fprintf(w, "  %9s-%-9s", thousands(st.From), thousands(st.To))
		for _, wl := range soakWorkloads {
			r := st.rate(wl)
			fmt.Fprintf(w, "  %s %5.0f/s p99 %4.0f ms", wl, r.OrdersPerSec, r.P99)
		}
		fmt.Fprintf(w, "  load %.1f\n", st.Load)
	}
	if c := s.Checkout; c != nil {
		fmt.Fprintf(w, "checkout soak: %s holds in %d chunks, %.1f min (timed out: %v): first %s %.0f holds/s, last %.0f: last/first %.2f pass %v %s; audits pass %v\n",
			thousands(c.reached()), len(c.Chunks), c.Seconds/60, c.TimedOut, thousands(c.Window), c.First, c.Last, c.Ratio, c.Pass, c.Reason, c.AuditsPass)
	}
	for _, t := range s.Targets {
		fmt.Fprintf(w, "  target %s: last/first %.2f (%.0f -> %.0f orders/s) pass %v %s; fresh tables after %.0f orders/s, last/fresh %.2f\n",
			t.Workload, t.Ratio, t.First, t.Last, t.Pass, t.Reason, t.Fresh, t.FreshRatio)
	}
}

// thousands writes 1234567 as 1,234,567.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func soakJSON(dir string) string { return filepath.Join(dir, "soak.json") }

func readSoak(path string) (*SoakResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s SoakResults
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

// writeOnly writes soak.json and soak.png, and replaces the Soak section of
// the report in place (or adds it), leaving the rest as it was.
func (s *SoakResults) writeOnly(o options) error {
	if err := writeResults(o.out, "soak", s, s.chart); err != nil {
		return err
	}
	return s.writeSection(o)
}

// writeSection replaces the Soak section of the report in place.
func (s *SoakResults) writeSection(o options) error {
	if err := replaceSection(o, soakHeading, s.markdown); err != nil {
		return err
	}
	return writeIssueSection(o, issueInputs{s: s})
}

// chart draws soak.png, and soak-checkout.png for the checkout soak.
func (s *SoakResults) chart(path string) error {
	if c := s.Checkout; c != nil && len(c.Steps) > 0 {
		if err := soakChart(checkoutChartPath(path), soakCurve{title: fmt.Sprintf("%s, %d VUs, checkouts, never analysed", s.Strategy, c.VUs),
			x: "holds placed (thousands)", rate: "holds placed/s", p99: "hold p99 latency", wls: checkoutWorkloads, steps: c.Steps,
			chunks: c.Chunks, step: c.Window}); err != nil {
			return err
		}
	}
	return soakChart(path, soakCurve{title: fmt.Sprintf("%s, %d VUs, never analysed", s.Strategy, s.VUs), x: "orders in the database (thousands)",
		rate: "accepted orders/s", p99: "p99 latency", wls: soakWorkloads, steps: s.Steps, chunks: s.Chunks, fresh: s.Fresh, reached: s.reached(), step: s.Step})
}

// checkoutChartPath is soak-checkout.png beside soak.png.
func checkoutChartPath(soakPNG string) string {
	return filepath.Join(filepath.Dir(soakPNG), "soak-checkout.png")
}

// soakCurve is what a soak chart draws.
type soakCurve struct {
	title, x, rate, p99 string
	wls                 []string
	steps               []SoakStep
	chunks, fresh       []SoakChunk
	reached, step       int64
}

// soakChart draws the rate and p99 against the count in the database, a line
// per workload through its steps, and each chunk as a dot.
func soakChart(path string, cv soakCurve) error {
	if len(cv.steps) == 0 {
		return nil
	}
	unit := strings.TrimSuffix(strings.Fields(cv.x)[0], "s")
	panels := make([]*plot.Plot, 0, 2)
	for _, panel := range []struct {
		title, unit string
		step        func(SoakRate) float64
		chunk       func(SoakChunk) float64
	}{
		{cv.rate, "per second", func(r SoakRate) float64 { return r.OrdersPerSec }, func(c SoakChunk) float64 { return c.OrdersPerSec }},
		{cv.p99, "ms", func(r SoakRate) float64 { return r.P99 }, func(c SoakChunk) float64 { return c.P99 }},
	} {
		p := plot.New()
		p.Title.Text = cv.title + ": " + panel.title
		p.X.Label.Text = cv.x
		p.Y.Label.Text = panel.unit
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		for k, wl := range cv.wls {
			var steps, dots plotter.XYs
			for _, st := range cv.steps {
				if r := st.rate(wl); r.Seconds > 0 {
					steps = append(steps, plotter.XY{X: float64(st.From+st.To) / 2 / 1000, Y: panel.step(r)})
				}
			}
			for _, c := range cv.chunks {
				if c.Workload == wl {
					dots = append(dots, plotter.XY{X: float64(c.From+c.To) / 2 / 1000, Y: panel.chunk(c)})
				}
			}
			colour := palette[k%len(palette)]
			line, points, err := plotter.NewLinePoints(steps)
			if err != nil {
				return err
			}
			line.Color, points.Color, line.Width = colour, colour, vg.Points(2)
			p.Add(line, points)
			p.Legend.Add(fmt.Sprintf("%s, per %s %ss", wl, thousands(cv.step), unit), line, points)
			if len(dots) > 0 {
				sc, err := plotter.NewScatter(dots)
				if err != nil {
					return err
				}
				sc.Color, sc.Shape, sc.Radius = colour, draw.CrossGlyph{}, vg.Points(2.5)
				p.Add(sc)
				p.Legend.Add(wl+", per chunk", sc)
			}
			for _, f := range cv.fresh {
				if f.Workload != wl {
					continue
				}
				fr, err := plotter.NewScatter(plotter.XYs{{X: float64(cv.reached) / 1000, Y: panel.chunk(f)}})
				if err != nil {
					return err
				}
				fr.Color, fr.Shape, fr.Radius = colour, draw.TriangleGlyph{}, vg.Points(5)
				p.Add(fr)
				p.Legend.Add(wl+", fresh tables after", fr)
			}
		}
		p.X.Min, p.Y.Min = 0, 0
		p.Y.Max *= 1.35 // room for the legend
		p.Y.Tick.Marker = wholeTicks{}
		panels = append(panels, p)
	}
	return savePanels(path, panels)
}

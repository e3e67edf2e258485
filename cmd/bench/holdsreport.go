package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const holdsHeading = "## Holds"

// markdown writes the report's Holds section.
func (h *HoldsResults) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "%s\n\nMeasured by `%s` (profile %s) on %s, commit %s: the default strategy (%s), %d replicas, %d VUs, quantity 1 and an Idempotency-Key on every request; each rate the median of %d runs of %s. A run is a pair: orders, then holds (TTL %s, none expires) and the confirms of those holds (the whole hold each), orders and holds each on emptied tables and new replicas, one right after the other, all three driven by the bench's own client; the ratios are the medians of the pairs' ratios. Ratios are within this run: the machine's cores are shared with everything else, so absolute figures move from run to run. Failed are the answers neither 201 nor 409, by status (503: the SKU's lock not had within the 2s lock wait).\n\n",
		holdsHeading, h.Command, profileName(h.Command), h.When, h.Commit, h.Strategy, h.Replicas, h.VUs, h.Repeats, h.Duration, holdTTL)
	fmt.Fprint(w, "| workload | orders/s | holds/s | confirms/s | hold / order | confirm / order | p99 order / hold / confirm | failed | audit |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range h.Points {
		audit := fmt.Sprintf("%d oversold, consistent: %v", p.Oversold, p.Consistent)
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f / %.0f / %.0f ms | %s | %s |\n", p.Title, p.Orders, p.Holds, p.Confirms,
			p.HoldRatio, p.ConfirmRatio, p.OrderP99, p.HoldP99, p.ConfirmP99, failures(p.Failed, p.FailedBy), audit)
	}
	if len(h.Bursts) > 0 {
		med, lo, hi := burstSummary(h.Bursts)
		fmt.Fprintf(w, "\n**The confirm burst.** %d holds of one unit on %d SKUs (in turn), placed %d at a time through the balancer, each with the TTL left to one instant %s after the first was sent, so that all expire together; then every confirm sent at once, the lock wait (%s) before the earliest `expires_at`, on new replicas of the default strategy, each burst on SKUs of its own and ending with the audit. A confirm answered 201 was confirmed before its hold expired. %d bursts: **%.0f confirmed** (median; %d to %d).\n\n",
			burstHolds, burstSKUs, burstPlacers, burstTTL, burstLockWait, len(h.Bursts), med, lo, hi)
		fmt.Fprint(w, "| burst | placed (s) | expiry spread | confirms sent before the expiry | confirmed | the others' answers | last answer after | audit |\n|---:|---:|---:|---:|---:|---|---:|---|\n")
		for i, b := range h.Bursts {
			fmt.Fprintf(w, "| %d | %d (%.2fs) | %.0f ms | %.2fs | %d | %s | %.2fs | %d oversold, consistent: %v |\n", i+1, b.Placed, b.PlaceS, b.SpreadMS,
				b.LeadS, b.Confirmed, failures(int64(b.Placed)-b.Confirmed, b.Others), b.LastS, b.Oversold, b.Consistent)
		}
	}
	if s := h.Sweep; s != nil {
		fmt.Fprintf(w, "\n**The sweeper.** %d holds of one unit each on one SKU, written with SQL in one transaction (%.1fs) as the service writes them (`reservations`, `reservation_lines`, a `stock_ledger` entry of kind `hold` each, the units moved from `skus.available` to `skus.reserved`), all with the same `expires_at`, before the replicas start; %d VUs order that same SKU throughout. Swept means `skus.reserved` read back 0 (polled every %s); \"during the sweep\" runs from the last reading of every unit still reserved to that one, and \"before\" is the window before expiry. The sweeper runs every second (the default `--sweep-interval`), in rounds of 500 holds in expiry order under the SKU's lock and fence.\n\n",
			s.Holds, s.InsertS, s.VUs, sweepPoll)
		done := fmt.Sprintf("%.2fs", s.DoneS)
		if s.TimedOut {
			done = "**not done by the deadline**"
		}
		fmt.Fprint(w, "| holds | expiry → first units back | expiry → all swept | swept/s | orders/s before (window) | during the sweep | after | during / before | expired | audit |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		fmt.Fprintf(w, "| %d | %.2fs | %s | %.0f | %.0f (%.1fs) | %.0f | %.0f | %.2f | %d | %d oversold, consistent: %v |\n",
			s.Holds, s.FirstS, done, s.HoldsPerS, s.Before, s.BeforeS, s.During, s.After, s.Ratio, s.Expired, s.Oversold, s.Consistent)
	}
	fmt.Fprintf(w, "\n![holds/s and confirms/s beside orders/s, and orders/s through the sweep](%s/holds.png)\n", out)
	fmt.Fprint(w, `
- A hold is an order whose units go to `+"`reserved`"+`: it joins the same per-SKU queue and
  is committed in the same batched transaction, so its rate should be the order's.
- A confirm is not batched: it takes the SKU's lock, then locks and ends one hold in a
  transaction of its own. On one hot SKU its rate is that of one commit per lock
  holding; spread over many SKUs the locks are held in parallel.
- The sweep returns the holds in rounds of 500, each round one transaction under the
  SKU's lock: orders wait for the lock while a round commits, and the sweeper waits
  its turn behind their batches.
`)
}

func (h *HoldsResults) printSummary(w io.Writer) {
	fmt.Fprintf(w, "\nholds on %s, %d VUs (median of %d runs of %s):\n", h.Strategy, h.VUs, h.Repeats, h.Duration)
	for _, p := range h.Points {
		fmt.Fprintf(w, "  %-16s orders %5.0f/s  holds %5.0f/s  confirms %5.0f/s  hold/order %.2f  confirm/order %.2f  failed %s  oversold %d consistent %v\n",
			p.Workload, p.Orders, p.Holds, p.Confirms, p.HoldRatio, p.ConfirmRatio, failures(p.Failed, p.FailedBy), p.Oversold, p.Consistent)
	}
	for i, b := range h.Bursts {
		fmt.Fprintf(w, "confirm burst %d: %d of %d placed holds confirmed before their expiry (others %s), sent %.2fs before it; oversold %d, consistent %v\n",
			i+1, b.Confirmed, b.Placed, failures(int64(b.Placed)-b.Confirmed, b.Others), b.LeadS, b.Oversold, b.Consistent)
	}
	if s := h.Sweep; s != nil {
		fmt.Fprintf(w, "sweep of %d holds: first units back %.2fs after expiry, all swept %.2fs after (timed out: %v), %.0f holds/s; "+
			"orders/s before %.0f, during %.0f, after %.0f: during/before %.2f; expired %d, oversold %d, consistent %v\n",
			s.Holds, s.FirstS, s.DoneS, s.TimedOut, s.HoldsPerS, s.Before, s.During, s.After, s.Ratio, s.Expired, s.Oversold, s.Consistent)
	}
}

// writeOnly writes holds.json and holds.png, and replaces the Holds section of
// the report in place (or adds it), leaving the rest as it was.
func (h *HoldsResults) writeOnly(o options) error {
	if err := writeResults(o.out, "holds", h, h.chart); err != nil {
		return err
	}
	if err := replaceSection(o, holdsHeading, h.markdown); err != nil {
		return err
	}
	return writeIssueSection(o, issueInputs{h: h})
}

// spliceSection replaces the Holds section of report (up to the next heading
// of its level) by section, or puts it before "## The strategies", or at the end.
func spliceSection(report, section []byte) []byte {
	return spliceHeading(report, section, holdsHeading)
}

// chart draws holds.png: the three rates per workload, and orders/s through
// the sweep with its expiry, first return and end marked.
func (h *HoldsResults) chart(path string) error {
	var panels []*plot.Plot
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %d VUs: accepted per second", h.Strategy, h.VUs)
	p.Y.Label.Text = "per second"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	width := vg.Points(22)
	names := make([]string, len(h.Points))
	for i, pt := range h.Points {
		names[i] = pt.Title
	}
	series := []struct {
		label string
		f     func(HoldsPoint) float64
		ratio func(HoldsPoint) float64
	}{
		{"orders", func(p HoldsPoint) float64 { return p.Orders }, nil},
		{"holds", func(p HoldsPoint) float64 { return p.Holds }, func(p HoldsPoint) float64 { return p.HoldRatio }},
		{"confirms", func(p HoldsPoint) float64 { return p.Confirms }, func(p HoldsPoint) float64 { return p.ConfirmRatio }},
	}
	for k, s := range series {
		vals := make(plotter.Values, len(h.Points))
		for i, pt := range h.Points {
			vals[i] = s.f(pt)
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color, bars.LineStyle.Width = palette[k%len(palette)], 0
		bars.Offset = width * vg.Length(k-1)
		p.Add(bars)
		if s.ratio != nil {
			p.Legend.Add(fmt.Sprintf("%s (%s of orders)", s.label, ratios(h.Points, s.ratio)), bars)
		} else {
			p.Legend.Add(s.label, bars)
		}
	}
	p.NominalX(names...)
	p.Y.Max *= 1.3 // room for the legend
	p.Y.Tick.Marker = wholeTicks{}
	panels = append(panels, p)

	if s := h.Sweep; s != nil && len(s.Timeline) > 0 {
		q := plot.New()
		q.Title.Text = fmt.Sprintf("orders/s on one SKU while %d holds expire", s.Holds)
		q.X.Label.Text = "s from the holds' expiry"
		q.Y.Label.Text = "orders/s"
		q.Add(plotter.NewGrid())
		q.Legend.Top = true
		xys := make(plotter.XYs, len(s.Timeline))
		for i, v := range s.Timeline {
			xys[i] = plotter.XY{X: s.TimelineFrom + (float64(i)+0.5)*s.TimelineStep, Y: v}
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width = palette[0], vg.Points(1.5)
		q.Add(line)
		q.Legend.Add(fmt.Sprintf("orders/s per %.2gs", s.TimelineStep), line)
		top := slices.Max(s.Timeline) * 1.3
		marks := []struct {
			label string
			x     float64
		}{{"expiry", 0}, {"first units back", s.FirstS}}
		if !s.TimedOut {
			marks = append(marks, struct {
				label string
				x     float64
			}{fmt.Sprintf("all swept (%.1fs)", s.DoneS), s.DoneS})
		}
		for i, m := range marks {
			v, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: 0}, {X: m.x, Y: top}})
			if err != nil {
				return err
			}
			v.Color = palette[(i+1)%len(palette)]
			v.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			q.Add(v)
			q.Legend.Add(m.label, v)
		}
		q.Y.Min, q.Y.Max = 0, top*1.2
		q.Y.Tick.Marker = wholeTicks{}
		q.X.Tick.Marker = everyTicks(5)
		panels = append(panels, q)
	}
	return savePanels(path, panels)
}

// ratios lists a ratio per workload, as "0.98×, 1.02×": the table's, the
// median of the pairs' ratios.
func ratios(points []HoldsPoint, ratio func(HoldsPoint) float64) string {
	parts := make([]string, len(points))
	for i, p := range points {
		parts[i] = fmt.Sprintf("%.2f×", ratio(p))
	}
	return strings.Join(parts, ", ")
}

// wholeTicks are the default ticks labelled without decimals.
type wholeTicks struct{}

func (wholeTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = fmt.Sprintf("%.0f", ts[i].Value)
		}
	}
	return ts
}

// failures reads "12 (503: 12)".
func failures(n int64, by map[string]int64) string {
	if n == 0 {
		return "0"
	}
	keys := slices.Sorted(maps.Keys(by))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, by[k])
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(parts, ", "))
}

// everyTicks marks the multiples of a step.
type everyTicks float64

func (e everyTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for v := math.Ceil(lo/float64(e)) * float64(e); v <= hi; v += float64(e) {
		out = append(out, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
	}
	return out
}

// point is the holds benchmark's point on workload w.
func (h *HoldsResults) point(w string) (HoldsPoint, bool) {
	if h == nil {
		return HoldsPoint{}, false
	}
	for _, p := range h.Points {
		if p.Workload == w {
			return p, true
		}
	}
	return HoldsPoint{}, false
}

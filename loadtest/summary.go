package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Summary is the end-of-test result, as text (k6's layout) and JSON.
type Summary struct {
	// Started is when the load began (after the seeding); it ended Duration
	// later (before the audit). A tool that samples the service's resources
	// reads the load's window off them.
	Started    time.Time
	Duration   time.Duration
	reqDur     *hdrhistogram.Histogram
	iterDur    *hdrhistogram.Histogram
	byKind     [nKinds]*hdrhistogram.Histogram // hold, confirm, release latency
	Named      map[string]checkCount           // named checks (the checkout's)
	Reqs       int64
	Failed     int64
	Checks     int64
	ChecksFail int64
	Iterations int64
	Dropped    int64
	Accepted   int64
	Refused    int64
	// Unanswered is the orders with neither a 201 nor a 409 for stock (no
	// answer, another status): asked about again at teardown.
	Unanswered int64
	Cancelled  int64
	Abandoned  int64
	// Split is the lines a 201 allocated from more than one location.
	Split    int64
	BytesIn  int64
	BytesOut int64
	MaxVUs   int64
	VUs      vuGauge // sampled each second, for k6's vus gauge
	Audit    Audit
	// Ceiling is the path of a ceiling run (GETs, no orders, no audit); empty
	// for orders.
	Ceiling  string
	Verdicts []Verdict
	// Timeline is each whole second of the run (a last part-second is left out).
	Timeline []Point
}

// Verdict is one threshold's outcome.
type Verdict struct {
	Metric string  `json:"metric"`
	Expr   string  `json:"threshold"`
	Actual float64 `json:"actual"`
	Pass   bool    `json:"pass"`
	agg    string  // the aggregation judged, for the value's unit
}

// Point is one second of the run.
type Point struct {
	Second int     `json:"second"`
	Reqs   int64   `json:"reqs"`
	Failed int64   `json:"failed"`
	P50    float64 `json:"p50_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
}

// summarize merges the VUs' figures and the audit's; audit is nil for a run
// that audits nothing (the ceiling), which then has no audit checks.
func summarize(d time.Duration, stats []*vuStats, lv *live, rec *recorder, audit *Audit) *Summary {
	s := &Summary{Duration: d, reqDur: newHist(), iterDur: newHist(),
		Dropped: lv.dropped.Load(), BytesIn: lv.bytesIn.Load(), BytesOut: lv.bytesOut.Load(), MaxVUs: lv.maxVUs.Load(),
		Named: map[string]checkCount{}}
	for k := range s.byKind {
		s.byKind[k] = newHist()
	}
	for _, v := range stats {
		for name, n := range v.named {
			c := s.Named[name]
			c.Passes += n.Passes
			c.Fails += n.Fails
			s.Named[name] = c
		}
		s.Reqs += v.reqs
		s.Failed += v.failed
		s.Checks += v.checks
		s.ChecksFail += v.checksFail
		s.Iterations += v.iterations
		s.Accepted += v.accepted
		s.Refused += v.refused
		s.Unanswered += int64(len(v.unknown))
		s.Cancelled += v.cancelled
		s.Abandoned += v.abandoned
		s.Split += v.split
	}
	if audit != nil {
		s.Audit = *audit
		// The audit's own checks: clients and service agree, and nothing is oversold.
		s.auditCheck(chkAuditAgree, len(audit.Mismatches) == 0 && audit.ServerAudit)
		s.auditCheck(chkAuditOversold, audit.Oversold == 0 && audit.Consistent)
		if e := audit.Events; e != nil { // and the feed tells the counters
			s.auditCheck(chkAuditEvents, e.Told)
		}
		if l := audit.Locations; l != nil { // and every location holds I1
			s.auditCheck(chkAuditLocations, len(l.Problems) == 0 && l.ServiceAudit)
		}
		if h := audit.Holds; h != nil { // and every hold's units accounted for
			s.auditCheck(chkAuditHolds, h.StillHeld == 0 && len(h.Problems) == 0)
			s.auditCheck(chkAuditSoldTwice, h.UnitsSoldTwice == 0)
			s.auditCheck(chkAuditLost, h.UnitsLost == 0 && audit.Reserved == 0)
		}
	}
	for i := range rec.shards {
		sh := &rec.shards[i]
		sh.mu.Lock()
		s.reqDur.Merge(sh.reqDur)
		s.iterDur.Merge(sh.iterDur)
		for k, h := range sh.byKind {
			if h != nil {
				s.byKind[k].Merge(h)
			}
		}
		sh.mu.Unlock()
	}
	rec.secMu.Lock()
	defer rec.secMu.Unlock()
	// Whole seconds only: the last one the run ended in holds a fraction of a
	// second's requests, and would chart as a fall in throughput that never was.
	whole := min(len(rec.secs), int(d/time.Second))
	for i, sec := range rec.secs[:whole] {
		s.Timeline = append(s.Timeline, Point{Second: i, Reqs: sec.reqs, Failed: sec.failed,
			P50: ms(sec.lat.ValueAtQuantile(50)), P95: ms(sec.lat.ValueAtQuantile(95)), P99: ms(sec.lat.ValueAtQuantile(99))})
	}
	return s
}

func (s *Summary) auditCheck(name string, pass bool) {
	c := s.Named[name]
	s.Checks++
	if pass {
		c.Passes++
	} else {
		c.Fails++
		s.ChecksFail++
	}
	s.Named[name] = c
}

// kindHist is the histogram of a per-request trend metric, nil for another.
func (s *Summary) kindHist(metric string) *hdrhistogram.Histogram {
	for k, m := range kindMetric {
		if m != "" && m == metric {
			return s.byKind[k]
		}
	}
	return nil
}

func ms(us int64) float64 { return float64(us) / 1000 }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// value is what a threshold judges: durations in milliseconds.
func (s *Summary) value(metric, agg string, p float64) float64 {
	secs := s.Duration.Seconds()
	counterOf := map[string]int64{"http_reqs": s.Reqs, "iterations": s.Iterations, "dropped_iterations": s.Dropped,
		"orders_accepted": s.Accepted, "orders_refused": s.Refused, "oversold": s.Audit.Oversold,
		"data_sent": s.BytesOut, "data_received": s.BytesIn}
	if h := s.Audit.Holds; h != nil {
		for k, v := range map[string]int64{"holds_placed": h.Placed, "holds_refused": h.Refused,
			"units_held": h.UnitsHeld, "units_confirmed": h.UnitsConfirmed, "units_released": h.UnitsReleased,
			"units_expired": h.UnitsExpired, "units_lost": h.UnitsLost, "units_sold_twice": h.UnitsSoldTwice} {
			counterOf[k] = v
		}
	}
	switch metric {
	case "http_req_duration", "iteration_duration", "hold_duration", "confirm_duration", "release_duration":
		h := s.reqDur
		switch metric {
		case "iteration_duration":
			h = s.iterDur
		case "http_req_duration":
		default:
			h = s.kindHist(metric)
		}
		if h == nil {
			return 0
		}
		switch agg {
		case "avg":
			return h.Mean() / 1000
		case "min":
			return ms(h.Min())
		case "max":
			return ms(h.Max())
		case "med":
			return ms(h.ValueAtQuantile(50))
		default:
			return ms(h.ValueAtQuantile(p))
		}
	case "http_req_failed":
		return ratio(s.Failed, s.Reqs)
	case "checks":
		return ratio(s.Checks-s.ChecksFail, s.Checks)
	case "vus":
		return float64(s.MaxVUs)
	}
	n := counterOf[metric]
	if agg == "rate" && secs > 0 {
		return float64(n) / secs
	}
	return float64(n)
}

func (s *Summary) judge(cfg Config) bool {
	pass := true
	metrics := make([]string, 0, len(cfg.Thresholds))
	for m := range cfg.Thresholds {
		metrics = append(metrics, m)
	}
	slices.Sort(metrics)
	for _, m := range metrics {
		for _, e := range cfg.Thresholds[m] {
			t, _ := ParseThreshold(m, e) // validated before the run
			ok, v := t.Evaluate(s)
			s.Verdicts = append(s.Verdicts, Verdict{Metric: m, Expr: e, Actual: v, Pass: ok, agg: t.Agg})
			pass = pass && ok
		}
	}
	return pass
}

func dur(msv float64) string {
	d := time.Duration(msv * float64(time.Millisecond))
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", msv)
	default:
		return fmt.Sprintf("%.0fµs", msv*1000)
	}
}

// formatValue writes what a threshold judged with its unit: durations in ms or
// s, rates of a rate metric in %, data in B, kB or MB, per second for a
// counter's rate, and counts bare.
func formatValue(metric, agg string, v float64) string {
	data := metric == "data_sent" || metric == "data_received"
	switch kind := metricKinds[metric]; {
	case kind == trend:
		return dur(v)
	case kind == rate:
		return fmt.Sprintf("%.2f%%", 100*v)
	case data && agg == "rate":
		return bytesHuman(int64(v)) + "/s"
	case data:
		return bytesHuman(int64(v))
	case agg == "rate":
		return fmt.Sprintf("%.2f/s", v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}

// checkNames is every check's name, sorted.
func (s *Summary) checkNames() []string {
	names := make([]string, 0, len(s.Named))
	for name := range s.Named {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// WriteText prints the summary in k6's layout.
func (s *Summary) WriteText(w io.Writer) {
	secs := s.Duration.Seconds()
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "     %s%s: %s\n", name, strings.Repeat(".", max(2, 32-len(name))), fmt.Sprintf(format, args...))
	}
	trendLine := func(name string, h *hdrhistogram.Histogram) {
		line(name, "avg=%s min=%s med=%s max=%s p(90)=%s p(95)=%s p(99)=%s",
			dur(h.Mean()/1000), dur(ms(h.Min())), dur(ms(h.ValueAtQuantile(50))), dur(ms(h.Max())),
			dur(ms(h.ValueAtQuantile(90))), dur(ms(h.ValueAtQuantile(95))), dur(ms(h.ValueAtQuantile(99))))
	}
	perSec := func(n int64) float64 {
		if secs == 0 {
			return 0
		}
		return float64(n) / secs
	}
	fmt.Fprintln(w)
	for _, name := range s.checkNames() { // as k6 lists its checks, above the metrics
		c := s.Named[name]
		mark := "✓"
		if c.Fails > 0 {
			mark = "✗"
		}
		fmt.Fprintf(w, "     %s %s\n      ↳  %.0f%% — ✓ %d / ✗ %d\n", mark, name, 100*ratio(c.Passes, c.Passes+c.Fails), c.Passes, c.Fails)
	}
	if len(s.Named) > 0 {
		fmt.Fprintln(w)
	}
	line("checks", "%.2f%% ✓ %d ✗ %d", 100*ratio(s.Checks-s.ChecksFail, s.Checks), s.Checks-s.ChecksFail, s.ChecksFail)
	line("data_received", "%s %s/s", bytesHuman(s.BytesIn), bytesHuman(int64(perSec(s.BytesIn))))
	line("data_sent", "%s %s/s", bytesHuman(s.BytesOut), bytesHuman(int64(perSec(s.BytesOut))))
	line("dropped_iterations", "%d %.1f/s", s.Dropped, perSec(s.Dropped))
	for k, h := range s.byKind {
		if h != nil && h.TotalCount() > 0 {
			trendLine(kindMetric[k], h)
		}
	}
	trendLine("http_req_duration", s.reqDur)
	line("http_req_failed", "%.2f%% ✓ %d ✗ %d", 100*ratio(s.Failed, s.Reqs), s.Failed, s.Reqs-s.Failed)
	fmt.Fprint(w, failedNote)
	line("http_reqs", "%d %.1f/s", s.Reqs, perSec(s.Reqs))
	trendLine("iteration_duration", s.iterDur)
	line("iterations", "%d %.1f/s", s.Iterations, perSec(s.Iterations))
	line("vus", "%d min=%d max=%d", s.VUs.Value, s.VUs.Min, s.VUs.Max)
	line("vus_max", "%d", s.MaxVUs)
	if s.Ceiling != "" {
		line("ceiling", "GET %s: %d answered 2xx, %.1f/s (no orders, no audit)", s.Ceiling, s.Accepted, perSec(s.Accepted))
		s.writeVerdicts(w)
		return
	}
	line("orders_accepted", "%d (cancelled %d)", s.Accepted, s.Cancelled)
	line("orders_refused", "%d", s.Refused)
	if sent := s.ordersSent(); sent > 0 {
		line("orders", "%d sent: %d placed (%.1f%%), %d refused for stock (%.1f%%), %d errors or unanswered (%.1f%%)",
			sent, s.Accepted, 100*ratio(s.Accepted, sent), s.Refused, 100*ratio(s.Refused, sent),
			s.Unanswered, 100*ratio(s.Unanswered, sent))
	}
	line("units_stocked", "%d", s.Audit.Stocked)
	line("units_sold", "%d by clients' count, %d by the service's", s.Audit.ClientSold, s.Audit.ServerSold)
	line("oversold", "%d", s.Audit.Oversold)
	if h := s.Audit.Holds; h != nil {
		line("holds", "%d placed, %d refused: %d confirmed, %d released, %d expired, %d still held",
			h.Placed, h.Refused, h.Confirmed, h.Released, h.Expired, h.StillHeld)
		line("units_held", "%d: %d confirmed, %d released, %d expired", h.UnitsHeld, h.UnitsConfirmed, h.UnitsReleased, h.UnitsExpired)
		line("units_reserved", "%d once every hold ended (after waiting %.1fs)", s.Audit.Reserved, h.WaitedS)
		line("units_lost", "%d", h.UnitsLost)
		line("units_sold_twice", "%d", h.UnitsSoldTwice)
		if h.Unsettled > 0 {
			line("holds_unsettled", "%d (answers lost and not learned at teardown)", h.Unsettled)
		}
		for _, p := range h.Problems {
			fmt.Fprintf(w, "     ✗ audit: %s\n", p)
		}
	}
	if s.Audit.Unsettled > 0 {
		line("orders_unsettled", "%d (answers lost and not learned at teardown)", s.Audit.Unsettled)
	}
	if !s.Audit.Consistent {
		fmt.Fprintln(w, "     ✗ audit: I1 broken: stocked != available + reserved + sold, or a negative count, on some SKU")
	}
	for _, m := range s.Audit.Mismatches {
		fmt.Fprintf(w, "     ✗ audit: %s\n", m)
	}
	if e := s.Audit.Events; e != nil {
		line("events", "%d of the run's SKUs in the feed (%d read), telling their counters: %v", e.Run, e.Read, e.Told)
		for _, p := range e.Problems {
			fmt.Fprintf(w, "     ✗ events: %s\n", p)
		}
	}
	if l := s.Audit.Locations; l != nil {
		line("locations", "%d SKUs in up to %d locations, %d counts read: oversold %d; GET /v1/audit agrees: %v; lines split %d",
			l.SKUs, l.Locations, l.Rows, l.Oversold, l.ServiceAudit, s.Split)
		for _, p := range l.Problems {
			fmt.Fprintf(w, "     ✗ locations: %s\n", p)
		}
	}
	if s.Audit.AuditProblem != "" {
		fmt.Fprintf(w, "     ✗ audit: %s\n", s.Audit.AuditProblem)
	}
	s.writeVerdicts(w)
}

// failedNote says what http_req_failed's marks count, under its line: k6's
// convention for a rate (✓ the samples that are true, here the failed
// requests), which reads otherwise as that many failures.
const failedNote = "       ↳  ✓ counts failed requests, ✗ the others (k6's convention for rates); a failure is no answer " +
	"or a status not expected: a 409 for stock (or a hold's 410) is not one\n"

// ordersSent is every order the VUs placed (a retry with the same key is the
// same order): placed, refused, or neither.
func (s *Summary) ordersSent() int64 { return s.Accepted + s.Refused + s.Unanswered }

func (s *Summary) writeVerdicts(w io.Writer) {
	if len(s.Verdicts) > 0 {
		fmt.Fprintln(w, "\n     thresholds:")
		for _, v := range s.Verdicts {
			mark := "✓"
			if !v.Pass {
				mark = "✗"
			}
			fmt.Fprintf(w, "     %s %s %s (actual %s)\n", mark, v.Metric, v.Expr, formatValue(v.Metric, v.agg, v.Actual))
		}
	}
	fmt.Fprintln(w)
}

// WriteJSON writes stockguard's own summary to path.
func (s *Summary) WriteJSON(path string) error {
	return writeJSON(path, s.ownJSON())
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ownJSON is stockguard's summary: flat figures, the audit, the thresholds'
// verdicts and the timeline, as its tools read them.
func (s *Summary) ownJSON() map[string]any {
	q := func(h *hdrhistogram.Histogram) map[string]float64 {
		return map[string]float64{"avg": h.Mean() / 1000, "min": ms(h.Min()), "med": ms(h.ValueAtQuantile(50)),
			"max": ms(h.Max()), "p(90)": ms(h.ValueAtQuantile(90)), "p(95)": ms(h.ValueAtQuantile(95)), "p(99)": ms(h.ValueAtQuantile(99))}
	}
	out := map[string]any{
		"duration_s":            s.Duration.Seconds(),
		"started_at":            s.Started.UTC().Format(time.RFC3339Nano),
		"ended_at":              s.Started.Add(s.Duration).UTC().Format(time.RFC3339Nano),
		"http_reqs":             s.Reqs,
		"http_req_failed":       ratio(s.Failed, s.Reqs),
		"http_req_duration_ms":  q(s.reqDur),
		"iteration_duration_ms": q(s.iterDur),
		"iterations":            s.Iterations,
		"dropped_iterations":    s.Dropped,
		"vus_max":               s.MaxVUs,
		"checks":                ratio(s.Checks-s.ChecksFail, s.Checks),
		"data_received":         s.BytesIn,
		"data_sent":             s.BytesOut,
		"orders_accepted":       s.Accepted,
		"orders_refused":        s.Refused,
		"orders_cancelled":      s.Cancelled,
		"orders_sent":           s.ordersSent(),
		"orders_unanswered":     s.Unanswered,
		"orders_refused_share":  ratio(s.Refused, s.ordersSent()),
		"abandoned_attempts":    s.Abandoned,
		"audit":                 s.Audit,
		"oversold":              s.Audit.Oversold,
		"thresholds":            s.Verdicts,
		"timeline":              s.Timeline,
	}
	if s.Ceiling != "" {
		// orders_accepted holds the 2xx answers; there is nothing to audit.
		out["ceiling"] = s.Ceiling
		delete(out, "orders_sent")
		delete(out, "orders_unanswered")
		delete(out, "orders_refused_share")
		delete(out, "audit")
		delete(out, "oversold")
	}
	named := s.Named
	if named == nil {
		named = map[string]checkCount{}
	}
	out["checks_by_name"] = named
	for k, h := range s.byKind {
		if h != nil && h.TotalCount() > 0 {
			out[kindMetric[k]+"_ms"] = q(h)
		}
	}
	if s.Audit.Locations != nil {
		out["lines_split"] = s.Split
	}
	if h := s.Audit.Holds; h != nil {
		out["units_lost"] = h.UnitsLost
		out["units_sold_twice"] = h.UnitsSoldTwice
		out["audit_failed"] = s.Audit.failed()
	}
	return out
}

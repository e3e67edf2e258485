package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The quantiles are histogram_quantile's: linear within the bucket the rank
// falls in, from 0 below the first bucket, the highest finite bound for a
// rank in +Inf.
func TestHistogramQuantile(t *testing.T) {
	h := Histogram{Bounds: []float64{0.1, 0.2, 0.5, 1}, Cum: []float64{10, 30, 90, 100}, Count: 100}
	for _, tc := range []struct{ q, want float64 }{
		{0.05, 0.05},  // rank 5 of the first bucket's 10: half of 0..0.1
		{0.1, 0.1},    // the first bucket's top
		{0.5, 0.3},    // rank 50: 20 of the 60 in 0.2..0.5
		{0.99, 0.95},  // rank 99: 9 of the 10 in 0.5..1
		{1, 1},        // every observation
		{0.2, 0.15},   // rank 20: 10 of the 20 in 0.1..0.2
		{0.75, 0.425}, // rank 75: 45 of the 60 in 0.2..0.5
	} {
		if got := h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	inf := Histogram{Bounds: []float64{0.1, 1}, Cum: []float64{50, 100}, Count: 200}
	if got := inf.Quantile(0.9); got != 1 {
		t.Errorf("a rank in +Inf: %v, want the highest finite bound 1", got)
	}
	if got := (Histogram{Bounds: []float64{1}, Cum: []float64{0}}).Quantile(0.5); !math.IsNaN(got) {
		t.Errorf("no observation: %v, want NaN", got)
	}
	// Empty buckets below the rank are skipped, not interpolated into.
	gap := Histogram{Bounds: []float64{0.01, 0.1, 1}, Cum: []float64{0, 0, 10}, Count: 10}
	if got := gap.Quantile(0.5); math.Abs(got-0.55) > 1e-12 {
		t.Errorf("after empty buckets: %v, want 0.55", got)
	}
}

const eventMetricsText = `# HELP stockguard_events_delivery_lag_seconds Time from a stock event's commit.
# TYPE stockguard_events_delivery_lag_seconds histogram
stockguard_events_delivery_lag_seconds_bucket{destination="nats",le="0.01"} 5
stockguard_events_delivery_lag_seconds_bucket{destination="nats",le="0.1"} 40
stockguard_events_delivery_lag_seconds_bucket{destination="nats",le="1"} 50
stockguard_events_delivery_lag_seconds_bucket{destination="nats",le="+Inf"} 51
stockguard_events_delivery_lag_seconds_sum{destination="nats"} 4.5
stockguard_events_delivery_lag_seconds_count{destination="nats"} 51
stockguard_events_delivery_lag_seconds_bucket{destination="webhook",le="0.01"} 999
stockguard_events_delivery_lag_seconds_bucket{destination="webhook",le="+Inf"} 999
stockguard_events_backlog 120
stockguard_events_backlog_oldest_seconds 0.25
stockguard_events_published_total{destination="nats"} 1.5e+06
stockguard_events_published_total{destination="webhook"} 7
stockguard_events_relay_leading 1
stockguard_redis_round_trips_total 12
`

// The events' metrics are read from the text format, the NATS destination's
// alone; two readings' difference is the observations between them, and the
// replicas' histograms add up.
func TestParseEventMetrics(t *testing.T) {
	m, err := parseEventMetrics(strings.NewReader(eventMetricsText))
	if err != nil {
		t.Fatal(err)
	}
	want := Histogram{Bounds: []float64{0.01, 0.1, 1}, Cum: []float64{5, 40, 50}, Count: 51}
	if !sameHistogram(m.lag, want) {
		t.Errorf("lag = %+v, want %+v", m.lag, want)
	}
	if m.backlog != 120 || m.oldest != 0.25 || m.published != 1.5e6 || !m.leading {
		t.Errorf("backlog %v, oldest %v, published %v, leading %v", m.backlog, m.oldest, m.published, m.leading)
	}
	before := Histogram{Bounds: []float64{0.01, 0.1, 1}, Cum: []float64{1, 10, 20}, Count: 20}
	d := m.lag.sub(before)
	if !sameHistogram(d, Histogram{Bounds: []float64{0.01, 0.1, 1}, Cum: []float64{4, 30, 30}, Count: 31}) {
		t.Errorf("sub = %+v", d)
	}
	s := Histogram{}.add(d).add(d)
	if !sameHistogram(s, Histogram{Bounds: []float64{0.01, 0.1, 1}, Cum: []float64{8, 60, 60}, Count: 62}) {
		t.Errorf("add = %+v", s)
	}
	if _, err := parseEventMetrics(strings.NewReader("stockguard_events_backlog{destination=\"nats\n")); err == nil {
		t.Error("a broken label: no error")
	}
}

func sameHistogram(a, b Histogram) bool {
	if a.Count != b.Count || len(a.Bounds) != len(b.Bounds) || len(a.Cum) != len(b.Cum) {
		return false
	}
	for i := range a.Bounds {
		if a.Bounds[i] != b.Bounds[i] || a.Cum[i] != b.Cum[i] {
			return false
		}
	}
	return true
}

// A fixed events.json: two ABBA rounds on the hot SKU, events on costing
// 1.05× off (0.21 against 0.20 CPU seconds per 1000 orders), the on runs'
// lag summed to 200 observations, and a catch-up run.
const eventsJSON = `{
  "command": "go run ./cmd/bench -events only", "when": "2026-11-27T10:00:00Z", "commit": "abc123",
  "strategy": "lock-batch", "replicas": 3, "vus": 64, "repeats": 2, "duration_ns": 2000000000, "warmup_ns": 1000000000,
  "cores": 2, "load_before": 1.5, "load_after": 1.8,
  "runs": [
    {"events": "off", "round": 1, "run": {"workload": "hot", "orders_accepted": 1000, "orders_per_s": 500, "p99_ms": 40, "consistent": true,
      "cpu": {"replicas_s": 0.1, "redis_s": 0.02, "postgres_s": 0.08}}},
    {"events": "on", "round": 1, "run": {"workload": "hot", "orders_accepted": 1000, "orders_per_s": 480, "p99_ms": 44, "consistent": true,
      "cpu": {"replicas_s": 0.105, "redis_s": 0.02, "postgres_s": 0.085, "lock_service_s": 0.004}},
      "lag": {"le": [0.01, 0.1, 1], "cumulative": [50, 90, 100], "count": 100}, "published": 1001},
    {"events": "on", "round": 2, "run": {"workload": "hot", "orders_accepted": 1000, "orders_per_s": 490, "p99_ms": 42, "consistent": true,
      "cpu": {"replicas_s": 0.105, "redis_s": 0.02, "postgres_s": 0.085, "lock_service_s": 0.004}},
      "lag": {"le": [0.01, 0.1, 1], "cumulative": [50, 90, 100], "count": 100}, "published": 1001},
    {"events": "off", "round": 2, "run": {"workload": "hot", "orders_accepted": 1000, "orders_per_s": 510, "p99_ms": 38, "consistent": true,
      "cpu": {"replicas_s": 0.1, "redis_s": 0.02, "postgres_s": 0.08}}}
  ],
  "catch_up": {"workload": "hot", "vus": 64, "down_s": 10, "down_actual_s": 10.1, "wait_bound_s": 120, "poll_s": 0.25,
    "stop_at_s": 5, "restart_at_s": 15.1, "before_window_s": 3.5, "orders_per_s_before": 1800, "orders_per_s_down": 1200,
    "orders_per_s_catching_up": 900, "orders_per_s_after": 1700, "steady_backlog": 250, "backlog_peak": 12000, "gauge_peak": 11500,
    "oldest_peak_s": 11.5, "caught_up": true, "catch_up_s": 7.5, "drained": true, "outbox_events": 30000, "stream_messages": 30000,
    "oversold": 0, "consistent": true,
    "samples": [{"t_s": 1, "db": 100, "gauge": 90}, {"t_s": 10, "db": 9000, "gauge": 5000}, {"t_s": 20, "db": 200, "gauge": 12000}, {"t_s": 25, "db": 50, "gauge": 40}],
    "timeline": [1800, 1700, 1200, 1100, 900, 1700], "timeline_step_s": 5}
}`

// The section is rendered from a fixed events.json: the configurations, the
// ratio, the lag's quantiles, the catch-up and the targets; written into a
// report it replaces its former self and leaves the rest; the chart draws.
func TestEventsSectionFromJSON(t *testing.T) {
	var e EventsResults
	if err := json.Unmarshal([]byte(eventsJSON), &e); err != nil {
		t.Fatal(err)
	}
	e.Points, e.Costs = eventPoints(e.Runs, workloads)
	if len(e.Costs) != 1 || math.Abs(e.Costs[0].Path-1.05) > 1e-9 || math.Abs(e.Costs[0].Replicas-1.05) > 1e-9 {
		t.Fatalf("costs = %+v, want hot at 1.05× on both", e.Costs)
	}
	// 200 observations: the median's rank 100 is the first bucket's top; the
	// p99's rank 198 is 18 of the 20 in 0.1..1.
	if c := e.Costs[0]; math.Abs(c.LagP50-0.01) > 1e-12 || math.Abs(c.LagP99-0.91) > 1e-12 {
		t.Errorf("lag p50 %v, p99 %v; want 0.01, 0.91", c.LagP50, c.LagP99)
	}
	var md bytes.Buffer
	e.markdown(&md, "benchmarks")
	got := md.String()
	for _, want := range []string{
		"## Stock events\n",
		"| one hot SKU | off | 505 | 39 ms | 100 + 20 + 80 = **200** | – | 0.00% | 0 oversold, consistent: true |",
		"| one hot SKU | on | 485 | 43 ms | 105 + 20 + 85 = **210** | 4 |",
		"| one hot SKU | **1.05×** (1.05, 1.05) | 1.05× | 0.96× | 10.0 ms / 910 ms (200) |",
		"as Prometheus's `histogram_quantile` does",
		"| 1800 (3.5 s) | 1200 | 900 | 1700 | 0 | 12,000 / 11,500 | 11.5 s | 7.5 s | true | 30,000 / 30,000 |",
		"### Issue 32: targets",
		"| one hot SKU: CPU per order with events ÷ without, whole path (replicas, Redis, PostgreSQL) | ≤ 1.10× | 1.05× | pass |",
		"| one hot SKU, 64 VUs: delivery lag, commit → JetStream ack, p50 / p99 | report | 10.0 ms / 910 ms | |",
		"| catch-up after NATS down 10 s (one hot SKU, 64 VUs) | report | 7.5 s after NATS was back (backlog peak 12,000 events) | |",
		"| the stream holds every event of the outbox | ≥ outbox | 30,000 of 30,000 | pass |",
		"![orders/s and the backlog through NATS's outage](benchmarks/events.png)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}

	if strings.Contains(got, "range from") {
		t.Error("rounds' ratios of 1.05 and 1.05 are called spread")
	}

	// A cost above the target, a stream short of the outbox, no catch-up.
	e.Costs[0].Path, e.Costs[0].PairPath = 1.2, []float64{0.6, 1.8}
	e.CatchUp.StreamMessages, e.CatchUp.CaughtUp = 29_999, false
	md.Reset()
	e.markdown(&md, "benchmarks")
	for _, want := range []string{"| ≤ 1.10× | 1.20× | **miss** |", "29,999 of 30,000 | **miss** |", "**not caught up within 120 s**",
		"**one hot SKU: the rounds' ratios range from 0.60 to 1.80**"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, md.String())
		}
	}

	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "benchmarks"), markdown: filepath.Join(dir, "BENCHMARKS.md")}
	report := "# Benchmarks\n\n## Lock services\n\nlocks\n\n## Stock events\n\nold\n\n## The strategies\n\nkept\n"
	if err := os.WriteFile(o.markdown, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "\nold\n") || !strings.Contains(s, "## Lock services\n\nlocks\n") || !strings.HasSuffix(s, "## The strategies\n\nkept\n") ||
		strings.Count(s, eventsHeading+"\n") != 1 {
		t.Errorf("the section not replaced in place:\n%s", s)
	}
	for _, f := range []string{"events.json", "events.png"} {
		if st, err := os.Stat(filepath.Join(o.out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// -render events.json writes the section again from the file.
	if err := rerender(filepath.Join(o.out, "events.json"), o, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// Without nats-server the section says why, and nothing else.
func TestEventsNotRun(t *testing.T) {
	e := EventsResults{onOff: onOff{Command: "go run ./cmd/bench", When: "2026-11-27T10:00:00Z"}, NotRun: "nats-server is not on the PATH"}
	var md bytes.Buffer
	e.markdown(&md, "benchmarks")
	if want := "## Stock events\n\nNot run by `go run ./cmd/bench` on 2026-11-27T10:00:00Z: nats-server is not on the PATH.\n"; md.String() != want {
		t.Errorf("got %q, want %q", md.String(), want)
	}
	if err := e.chart(filepath.Join(t.TempDir(), "events.png")); err != nil {
		t.Error(err)
	}
}

// -events and -events-vus are checked before anything is measured.
func TestEventsFlags(t *testing.T) {
	for _, args := range [][]string{{"-events", "maybe"}, {"-events-vus", "0"}} {
		err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "events") {
			t.Errorf("%v: %v, want an error naming events", args, err)
		}
	}
}

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

// A fixed auth.json: two ABBA rounds on the hot SKU, the checks on taking
// 0.96× the orders/s of off (19,200 orders against 20,000 in 20 s) and 1.05×
// its replicas' CPU per order (105 µs against 100).
const authJSON = `{
  "command": "go run ./cmd/bench -auth only", "when": "2026-12-01T10:00:00Z", "commit": "abc123",
  "strategy": "lock-batch", "replicas": 3, "vus": 64, "repeats": 2, "duration_ns": 10000000000, "warmup_ns": 1000000000,
  "cores": 2, "load_before": 1.5, "load_after": 1.8, "rate_limit_per_second": 1000000, "rate_limit_burst": 1000000,
  "runs": [
    {"auth": "off", "round": 1, "run": {"workload": "hot", "orders_accepted": 10000, "duration_s": 10, "orders_per_s": 1000, "p99_ms": 40,
      "consistent": true, "cpu": {"replicas_s": 1.0, "redis_s": 0.2, "postgres_s": 0.8}}},
    {"auth": "on", "round": 1, "run": {"workload": "hot", "orders_accepted": 9500, "duration_s": 10, "orders_per_s": 950, "p99_ms": 44,
      "consistent": true, "cpu": {"replicas_s": 0.9975, "redis_s": 0.25, "postgres_s": 0.76}}},
    {"auth": "on", "round": 2, "run": {"workload": "hot", "orders_accepted": 9700, "duration_s": 10, "orders_per_s": 970, "p99_ms": 42,
      "consistent": true, "cpu": {"replicas_s": 1.0185, "redis_s": 0.25, "postgres_s": 0.76}}},
    {"auth": "off", "round": 2, "run": {"workload": "hot", "orders_accepted": 10000, "duration_s": 10, "orders_per_s": 1000, "p99_ms": 38,
      "consistent": true, "cpu": {"replicas_s": 1.0, "redis_s": 0.2, "postgres_s": 0.8}}}
  ]
}`

// The section is rendered from a fixed auth.json: the configurations, the
// pooled ratios with each round's, the targets; written into a report it
// replaces its former self and leaves the rest; the chart draws.
func TestAuthSectionFromJSON(t *testing.T) {
	var a AuthResults
	if err := json.Unmarshal([]byte(authJSON), &a); err != nil {
		t.Fatal(err)
	}
	a.Points, a.Costs = authPoints(a.Runs, workloads)
	if len(a.Costs) != 1 {
		t.Fatalf("costs = %+v, want hot alone", a.Costs)
	}
	c := a.Costs[0]
	if math.Abs(c.Rate-0.96) > 1e-9 || math.Abs(c.Replicas-1.05) > 1e-9 {
		t.Errorf("orders/s %v×, replicas' CPU %v×; want 0.96×, 1.05×", c.Rate, c.Replicas)
	}
	if len(c.PairRate) != 2 || math.Abs(c.PairRate[0]-0.95) > 1e-9 || math.Abs(c.PairRate[1]-0.97) > 1e-9 {
		t.Errorf("rounds' orders/s ratios %v, want 0.95, 0.97", c.PairRate)
	}
	var md bytes.Buffer
	a.markdown(&md, "benchmarks")
	got := md.String()
	for _, want := range []string{
		"## Authentication and rate limits\n",
		"a rate limit of 1,000,000 requests/s and a burst of 1,000,000",
		"| one hot SKU | off | 1000 | 39 ms | 100 + 20 + 80 = **200** | 0.00% | 0 | 0 oversold, consistent: true |",
		"| one hot SKU | on | 960 | 43 ms | 105 + 26 + 79 = **210** | 0.00% | 0 | 0 oversold, consistent: true |",
		"| one hot SKU | **0.96×** (0.95, 0.97) | **1.05×** (1.05, 1.05) | 1.05× | 39 → 43 ms |",
		"![orders/s with the checks off and on, and their ratios](benchmarks/auth.png)",
		"### Issue 39: targets",
		"| one hot SKU, 64 VUs: orders/s with every order authenticated and rate limited ÷ with the checks off | ≥ 0.90× | 0.96× | pass |",
		"| one hot SKU, 64 VUs: the replicas' CPU per order, the same | ≤ 1.10× | 1.05× | pass |",
		"| 429s: the limits high enough not to refuse | 0 | 0 | pass |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "range from") {
		t.Error("rounds' ratios of 0.95 and 0.97 are called spread")
	}

	// Below the target, rounds far apart, and a 429.
	a.Costs[0].Rate, a.Costs[0].PairRate, a.Costs[0].Replicas = 0.85, []float64{0.7, 1.0}, 1.2
	a.Runs[1].Limited = 3
	md.Reset()
	a.markdown(&md, "benchmarks")
	for _, want := range []string{"| ≥ 0.90× | 0.85× | **miss** |", "| ≤ 1.10× | 1.20× | **miss** |", "| 0 | 3 | **miss** |",
		"**one hot SKU, orders/s: the rounds' ratios range from 0.70 to 1.00**"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, md.String())
		}
	}

	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "benchmarks"), markdown: filepath.Join(dir, "BENCHMARKS.md")}
	report := "# Benchmarks\n\n## Stock events\n\nevents\n\n" + authHeading + "\n\nold\n\n## The strategies\n\nkept\n"
	if err := os.WriteFile(o.markdown, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "\nold\n") || !strings.Contains(s, "## Stock events\n\nevents\n") || !strings.HasSuffix(s, "## The strategies\n\nkept\n") ||
		strings.Count(s, authHeading+"\n") != 1 {
		t.Errorf("the section not replaced in place:\n%s", s)
	}
	for _, f := range []string{"auth.json", "auth.png"} {
		if st, err := os.Stat(filepath.Join(o.out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// -render auth.json writes the section again from the file.
	if err := rerender(filepath.Join(o.out, "auth.json"), o, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// Nothing measured (no hot or zipf among -workloads): no chart, and the
// targets' 429 line does not pass on no runs.
func TestAuthNothingMeasured(t *testing.T) {
	a := AuthResults{onOff: onOff{Command: "go run ./cmd/bench -auth only -workloads multi"}}
	if err := a.chart(filepath.Join(t.TempDir(), "auth.png")); err != nil {
		t.Error(err)
	}
	var md bytes.Buffer
	a.markdown(&md, "benchmarks")
	if !strings.Contains(md.String(), "| 0 | 0 | **miss** |") {
		t.Errorf("no runs pass the 429 target:\n%s", md.String())
	}
}

// The 429s are summed over every route and method of the HTTP counter, and
// nothing else.
func TestParseStatusCount(t *testing.T) {
	const text = `# HELP stockguard_http_requests_total HTTP requests by route, method and status.
# TYPE stockguard_http_requests_total counter
stockguard_http_requests_total{method="POST",route="/v1/orders",status="201"} 9000
stockguard_http_requests_total{method="POST",route="/v1/orders",status="429"} 3
stockguard_http_requests_total{method="GET",route="/v1/skus/:sku",status="429"} 2
stockguard_http_requests_totally{status="429"} 100
stockguard_orders_refused_total{status="429"} 100
`
	n, err := parseStatusCount(strings.NewReader(text), "429")
	if err != nil || n != 5 {
		t.Errorf("429s = %d, %v; want 5", n, err)
	}
	if n, err := parseStatusCount(strings.NewReader(text), "500"); err != nil || n != 0 {
		t.Errorf("500s = %d, %v; want 0", n, err)
	}
}

// -auth and -auth-vus are checked before anything is measured.
func TestAuthFlags(t *testing.T) {
	for _, args := range [][]string{{"-auth", "maybe"}, {"-auth-vus", "0"}} {
		err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "auth") {
			t.Errorf("%v: %v, want an error naming auth", args, err)
		}
	}
}

// The rounds go ABBA on each workload; a round's pair needs both runs, and
// the pairs come in the rounds' order.
func TestABBARoundsAndPairs(t *testing.T) {
	var got []string
	err := abbaRounds(workloads[:2], 3, []string{"a", "b"}, func(w Workload, cfg string, round int) error {
		got = append(got, w.Name+"/"+cfg)
		return nil
	})
	want := "hot/a hot/b hot/b hot/a hot/a hot/b zipf/a zipf/b zipf/b zipf/a zipf/a zipf/b"
	if err != nil || strings.Join(got, " ") != want {
		t.Errorf("order %v (%v), want %s", got, err, want)
	}
	type run struct {
		cfg   string
		round int
		r     Run
	}
	runs := []run{{"b", 2, Run{Workload: "hot", Accepted: 4}}, {"a", 2, Run{Workload: "hot", Accepted: 2}},
		{"a", 1, Run{Workload: "hot", Accepted: 1}}, {"b", 1, Run{Workload: "hot", Accepted: 3}},
		{"a", 3, Run{Workload: "hot", Accepted: 5}}, {"b", 1, Run{Workload: "zipf", Accepted: 9}}}
	pairs := roundPairs(runs, "hot", "a", "b", func(x run) (string, int, Run) { return x.cfg, x.round, x.r })
	rs := pairRatios(pairs, func(r Run) float64 { return float64(r.Accepted) })
	if len(rs) != 2 || rs[0] != 3 || rs[1] != 2 {
		t.Errorf("ratios %v, want [3 2]: round 3 has no b, zipf is another workload", rs)
	}
}

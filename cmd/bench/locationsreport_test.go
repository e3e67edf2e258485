package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A fixed locations.json: two ABBA rounds on the hot SKU, three locations
// taking 0.95× the orders/s of one (19,000 orders against 20,000 in 20 s) and
// 1.10× its CPU per order; a sell-out with nothing oversold.
const locationsJSON = `{
  "command": "go run ./cmd/bench -locations only", "when": "2026-12-01T10:00:00Z", "commit": "abc123",
  "strategy": "lock-batch", "replicas": 3, "vus": 64, "repeats": 2, "duration_ns": 10000000000, "warmup_ns": 1000000000,
  "cores": 2, "load_before": 1.5, "load_after": 1.8, "max_quantity": 2,
  "runs": [
    {"locations": "one", "round": 1, "run": {"workload": "hot", "orders_accepted": 10200, "duration_s": 10, "p99_ms": 40,
      "consistent": true, "cpu": {"replicas_s": 1.02, "redis_s": 0.204, "postgres_s": 0.816}}},
    {"locations": "three", "round": 1, "run": {"workload": "hot", "orders_accepted": 9400, "duration_s": 10, "p99_ms": 44, "lines_split": 1,
      "consistent": true, "cpu": {"replicas_s": 1.2, "redis_s": 0.2, "postgres_s": 0.668}}},
    {"locations": "three", "round": 2, "run": {"workload": "hot", "orders_accepted": 9600, "duration_s": 10, "p99_ms": 42, "lines_split": 1,
      "consistent": true, "cpu": {"replicas_s": 1.2, "redis_s": 0.2, "postgres_s": 0.712}}},
    {"locations": "one", "round": 2, "run": {"workload": "hot", "orders_accepted": 9800, "duration_s": 10, "p99_ms": 38,
      "consistent": true, "cpu": {"replicas_s": 0.98, "redis_s": 0.196, "postgres_s": 0.784}}}
  ],
  "sellout": {"workload": "sellout-locations", "orders_accepted": 300, "orders_refused": 2000, "lines_split": 12, "consistent": true}
}`

// The section is rendered from a fixed locations.json: the configurations
// with each run's figures, the pooled ratios with each round's, the noise of
// the one-location runs, the sell-out and the targets; written into a report
// it replaces its former self and leaves the rest; the chart draws.
func TestLocationsSectionFromJSON(t *testing.T) {
	var l LocationsResults
	if err := json.Unmarshal([]byte(locationsJSON), &l); err != nil {
		t.Fatal(err)
	}
	l.Points, l.Costs = locationsPoints(l.Runs, workloads)
	if len(l.Costs) != 1 {
		t.Fatalf("costs = %+v, want hot alone", l.Costs)
	}
	c := l.Costs[0]
	if math.Abs(c.Rate-0.95) > 1e-9 || math.Abs(c.Path-1.1) > 1e-9 {
		t.Errorf("orders/s %v×, CPU per order %v×; want 0.95×, 1.10×", c.Rate, c.Path)
	}
	if len(c.PairRate) != 2 || math.Abs(c.PairRate[0]-9400.0/10200) > 1e-9 || math.Abs(c.PairRate[1]-9600.0/9800) > 1e-9 {
		t.Errorf("rounds' orders/s ratios %v", c.PairRate)
	}
	one, _ := l.point("hot", locOne)
	if !slices.Equal(one.RunRates, []float64{1020, 980}) || math.Abs(one.spread()-0.04) > 1e-9 {
		t.Errorf("one location's runs %v, spread %v; want 1020, 980 and 0.04", one.RunRates, one.spread())
	}
	var md bytes.Buffer
	l.markdown(&md, "benchmarks")
	got := md.String()
	for _, want := range []string{
		locationsHeading + "\n",
		"lines of 1 to 2 units",
		"| one hot SKU | one location | 1000 (1020, 980) | 39 ms | 100 + 20 + 80 = **200** | 0 | 0.00% | 0 oversold, consistent: true |",
		"| one hot SKU | three locations | 950 (940, 960) | 43 ms | 126 + 21 + 73 = **220** | 2 | 0.00% | 0 oversold, consistent: true |",
		"| one hot SKU | **0.95×** (0.92, 0.98) | **1.10×** (1.10, 1.10) | 1.26× | 39 → 43 ms | ±2% |",
		"![orders/s with one location and three, and their ratios](benchmarks/locations.png)",
		"300 orders placed, 2,000 refused for stock, 12 lines split",
		"### Issue 41: the locations' targets",
		"| one hot SKU, 64 VUs: orders/s with three locations (allocated lines, some split) ÷ one location | ≥ 0.90× | 0.95× (rounds 0.92, 0.98) | pass |",
		"| oversold, every run and the sell-out, per location and in total | 0 | 0, consistent: true | pass |",
		"hot 1000 orders/s, runs 1020, 980 (±2%)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the section lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "range from") {
		t.Error("rounds' ratios of 0.92 and 0.98 are called spread")
	}

	// Below the target, and a run whose audit found a location oversold.
	l.Costs[0].Rate = 0.85
	l.Runs[1].Run.Oversold, l.Runs[1].Run.Consistent = 2, false
	md.Reset()
	l.markdown(&md, "benchmarks")
	for _, want := range []string{"| ≥ 0.90× | 0.85× (rounds 0.92, 0.98) | **miss** |", "| 0 | 2, consistent: false | **miss** |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the section lacks %q:\n%s", want, md.String())
		}
	}

	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "benchmarks"), markdown: filepath.Join(dir, "BENCHMARKS.md")}
	report := "# Benchmarks\n\n" + authHeading + "\n\nauth\n\n" + locationsHeading + "\n\nold\n\n## The strategies\n\nkept\n"
	if err := os.WriteFile(o.markdown, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "\nold\n") || !strings.Contains(s, authHeading+"\n\nauth\n") || !strings.HasSuffix(s, "## The strategies\n\nkept\n") ||
		strings.Count(s, locationsHeading+"\n") != 1 {
		t.Errorf("the section not replaced in place:\n%s", s)
	}
	for _, f := range []string{"locations.json", "locations.png"} {
		if st, err := os.Stat(filepath.Join(o.out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// -render locations.json writes the section again from the file.
	if err := rerender(filepath.Join(o.out, "locations.json"), o, io.Discard); err != nil {
		t.Fatal(err)
	}
}

// Nothing measured: no chart, and the oversold target does not pass on no
// runs.
func TestLocationsNothingMeasured(t *testing.T) {
	l := LocationsResults{onOff: onOff{Command: "go run ./cmd/bench -locations only -workloads multi"}}
	if err := l.chart(filepath.Join(t.TempDir(), "locations.png")); err != nil {
		t.Error(err)
	}
	var md bytes.Buffer
	l.markdown(&md, "benchmarks")
	if !strings.Contains(md.String(), "| 0 | 0, consistent: false | **miss** |") {
		t.Errorf("no runs pass the oversold target:\n%s", md.String())
	}
}

// -locations and -locations-vus are checked before anything is measured;
// the configurations' load generator flags.
func TestLocationsFlags(t *testing.T) {
	for _, args := range [][]string{{"-locations", "maybe"}, {"-locations-vus", "0"}} {
		err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "locations") {
			t.Errorf("%v: %v, want an error naming locations", args, err)
		}
	}
	if o := (options{locations: "only"}); !o.only() {
		t.Error("-locations only is not a section alone")
	}
	if got := strings.Join(locationsArgs(locOne), " "); got != "-max-quantity 2" {
		t.Errorf("one location: %s", got)
	}
	if got := strings.Join(locationsArgs(locThree), " "); got != "-max-quantity 2 -locations 3" {
		t.Errorf("three locations: %s", got)
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A checkout run's summary: holds placed over the seconds of load, the hold's
// p99 and the audit's counts; a failed audit is a chunk that did not pass.
func TestReadCheckoutSummary(t *testing.T) {
	sum := `{"duration_s": 10, "http_req_failed": 0.001, "hold_duration_ms": {"p(99)": 42.5}, "audit_failed": false,
"audit": {"oversold": 0, "server_consistent": true, "orders_unsettled": 0,
  "holds": {"holds_placed": 5000, "holds_confirmed": 3000, "holds_released": 1250, "holds_expired": 750, "units_lost": 0, "units_sold_twice": 0}}}`
	r, err := readCheckoutSummary(strings.NewReader(sum))
	if err != nil {
		t.Fatal(err)
	}
	if r.Accepted != 5000 || r.OrdersPerSec != 500 || r.P99 != 42.5 || !r.Consistent || r.confirmed != 3000 || r.released != 1250 || r.expired != 750 {
		t.Fatalf("got %+v", r)
	}
	r, err = readCheckoutSummary(strings.NewReader(strings.Replace(sum, `"audit_failed": false`, `"audit_failed": true`, 1)))
	if err != nil || r.Consistent {
		t.Fatalf("a failed audit: %+v, %v", r, err)
	}
	if _, err := readCheckoutSummary(strings.NewReader(`{"duration_s": 10, "audit": {}}`)); err == nil {
		t.Fatal("a summary without holds read as a checkout run")
	}
}

// checkoutResults is a soak of 300 holds in windows of 100, the last at 0.85×.
func checkoutResults() *SoakResults {
	s := &SoakResults{Command: "go run ./cmd/bench -soak only", Strategy: "lock-batch", Replicas: 3, VUs: 64, Orders: 100, Step: 100,
		Chunks: []SoakChunk{{Workload: "hot", To: 100, Accepted: 100, Seconds: 1, OrdersPerSec: 100, Consistent: true}}}
	s.Steps = soakSteps(s.Chunks, s.Step, s.Orders, soakWorkloads)
	c := &CheckoutSoak{Holds: 300, Window: 100, VUs: 64, Workload: checkoutWorkload.Title, HoldTTL: "5s", Think: "50ms", Confirm: 0.6, Release: 0.25,
		AuditsPass: true, Confirmed: 180, Released: 75, Expired: 45, Counted: 300}
	for i, rate := range []float64{100, 95, 85} {
		c.Chunks = append(c.Chunks, SoakChunk{Workload: checkoutWorkload.Name, From: int64(100 * i), To: int64(100 * (i + 1)), Accepted: 100,
			Seconds: 100 / rate, OrdersPerSec: rate, P99: 10 * float64(i+1), Consistent: true})
	}
	c.Steps = soakSteps(c.Chunks, c.Window, c.Holds, checkoutWorkloads)
	c.judge()
	s.Checkout = c
	return s
}

func TestCheckoutSoakJudgeAndReport(t *testing.T) {
	s := checkoutResults()
	c := s.Checkout
	if !near(c.First, 100) || !near(c.Last, 85) || !near(c.Ratio, 0.85) || c.Pass {
		t.Fatalf("judged %+v", c)
	}
	row := findRow(t, issueRows(issueInputs{s: s}), "checkout soak")
	if row.Now != "0.85 (100 → 85 holds/s), 300 holds in all" || row.Mark != "**miss**" {
		t.Errorf("row %+v", row)
	}
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "benchmarks"), markdown: filepath.Join(dir, "BENCHMARKS.md")}
	if err := s.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"soak.png", "soak-checkout.png"} {
		if fi, err := os.Stat(filepath.Join(o.out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### The checkout soak", "First 100 holds/s, last 85: **0.85**, **miss**.", "| 200 – 300 | 85 | 30 ms |",
		"300 holds, not the issue's 1,000,000", "soak-checkout.png",
		"| checkout soak, last 100k ÷ first 100k holds | – | ≥ 0.90 | 0.85 (100 → 85 holds/s), 300 holds in all | **miss** |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	// A soak.json from before the checkout soak renders without it.
	s.Checkout = nil
	var b bytes.Buffer
	s.markdown(&b, o.out)
	if strings.Contains(b.String(), "checkout") {
		t.Error("a soak without the checkout soak reports one")
	}
	if row := findRow(t, issueRows(issueInputs{s: s}), "checkout soak"); row.Mark != notMeasured {
		t.Errorf("row without the checkout soak %+v", row)
	}
}

// One window of holds compares nothing.
func TestCheckoutSoakOneWindow(t *testing.T) {
	c := &CheckoutSoak{Holds: 100, Window: 100, Chunks: []SoakChunk{{Workload: checkoutWorkload.Name, To: 100, Accepted: 100, Seconds: 1}}}
	c.Steps = soakSteps(c.Chunks, c.Window, c.Holds, checkoutWorkloads)
	c.judge()
	if c.Pass || c.Reason == "" {
		t.Fatalf("%+v", c)
	}
}

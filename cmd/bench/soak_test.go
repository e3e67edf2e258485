package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A chunk's orders and seconds are shared between the steps it straddles in
// proportion to its orders in each; a step's p99 is weighted by orders.
func TestSoakSteps(t *testing.T) {
	chunks := []SoakChunk{
		{Workload: "hot", From: 0, To: 60, Accepted: 60, Seconds: 6, P99: 10},      // 10/s: 60 in step 1
		{Workload: "zipf", From: 60, To: 100, Accepted: 40, Seconds: 8, P99: 100},  // 5/s: 40 in step 1
		{Workload: "hot", From: 100, To: 180, Accepted: 80, Seconds: 10, P99: 20},  // 8/s: 80 in step 2
		{Workload: "zipf", From: 180, To: 240, Accepted: 60, Seconds: 20, P99: 50}, // 3/s: 20 in step 2, 40 in step 3
		{Workload: "hot", From: 240, To: 290, Accepted: 50, Seconds: 10, P99: 40},  // 5/s: 50 in step 3, beyond the goal of 280 too
	}
	steps := soakSteps(chunks, 100, 280, soakWorkloads)
	if len(steps) != 3 {
		t.Fatalf("%d steps, want 3: %+v", len(steps), steps)
	}
	want := []struct {
		from, to        int64
		full            bool
		hot, zipf       float64 // orders/s
		hotP99, zipfP99 float64
		hotN, zipfN     float64 // orders
	}{
		{0, 100, true, 10, 5, 10, 100, 60, 40},
		// zipf: 20 of the chunk's 60 orders, so a third of its 20 s.
		{100, 200, true, 8, 3, 20, 50, 80, 20},
		// Up to the goal: 40 zipf orders (40/60 of 20 s), and 40 of the hot
		// chunk's 50 (40/50 of 10 s); the 10 orders past the goal in no step.
		{200, 280, false, 5, 3, 40, 50, 40, 40},
	}
	for i, w := range want {
		s := steps[i]
		hot, zipf := s.rate("hot"), s.rate("zipf")
		if s.From != w.from || s.To != w.to || s.Full != w.full || !near(hot.OrdersPerSec, w.hot) || !near(zipf.OrdersPerSec, w.zipf) ||
			!near(hot.P99, w.hotP99) || !near(zipf.P99, w.zipfP99) || !near(hot.Orders, w.hotN) || !near(zipf.Orders, w.zipfN) {
			t.Errorf("step %d: got %+v, want %+v", i+1, s, w)
		}
	}

	// The p99 of a step with two chunks of a workload is weighted by their
	// orders in it, and the rate is orders over seconds, not a mean of rates.
	two := soakSteps([]SoakChunk{
		{Workload: "hot", From: 0, To: 30, Accepted: 30, Seconds: 1, P99: 10},
		{Workload: "hot", From: 30, To: 100, Accepted: 70, Seconds: 9, P99: 20},
	}, 100, 100, soakWorkloads)
	if r := two[0].rate("hot"); !near(r.OrdersPerSec, 10) || !near(r.P99, 17) {
		t.Errorf("two chunks: %.2f orders/s p99 %.2f, want 10 (100 in 10 s) and 17 (0.3×10 + 0.7×20)", r.OrdersPerSec, r.P99)
	}
	if r := two[0].rate("zipf"); r.Seconds != 0 || r.OrdersPerSec != 0 {
		t.Errorf("no zipf chunk: got %+v, want nothing", r)
	}
	if soakSteps(nil, 100, 100, soakWorkloads) != nil {
		t.Error("steps without chunks")
	}
}

func soakFixture(hotLast, zipfLast float64) *SoakResults {
	var chunks []SoakChunk
	var n int64
	for i := range 2 { // a step each
		for _, w := range soakWorkloads {
			rate := 1000.0
			if i == 1 { // the last step
				rate = map[string]float64{"hot": hotLast, "zipf": zipfLast}[w]
			}
			chunks = append(chunks, SoakChunk{Workload: w, From: n, To: n + 50, Accepted: 50, Seconds: 50 / rate,
				WallS: 50/rate + 0.5, OrdersPerSec: rate, P99: 1e5 / rate, Consistent: true, Load: float64(1 + i)})
			n += 50
		}
	}
	s := &SoakResults{Command: "go run ./cmd/bench -soak only", Strategy: "lock-batch", Replicas: 3, VUs: 64, Orders: 200, Step: 100,
		Autovacuum: "autovacuum on, autovacuum_naptime 60s", Seconds: 60, Counted: n, Chunks: chunks,
		Tables: []SoakTable{{Name: "orders", Rows: 200, Bytes: 1 << 20, Autoanalyzes: 2}},
		// The control after: the machine slowed zipf as much as the history did, hot not.
		Fresh: []SoakChunk{{Workload: "hot", OrdersPerSec: 1000, Accepted: 10, Seconds: 0.01}, {Workload: "zipf", OrdersPerSec: 850, Accepted: 10, Seconds: 0.01}}}
	s.Steps = soakSteps(chunks, s.Step, s.Orders, soakWorkloads)
	s.judge()
	return s
}

// The target compares each workload's last whole step with its first: 90% or
// more passes; a soak stopped at its deadline cannot pass.
func TestSoakJudge(t *testing.T) {
	s := soakFixture(950, 850)
	if len(s.Targets) != 2 {
		t.Fatalf("%d targets, want 2", len(s.Targets))
	}
	hot, zipf := s.Targets[0], s.Targets[1]
	if hot.Workload != "hot" || !hot.Pass || !near(hot.Ratio, 0.95) || !near(hot.First, 1000) || !near(hot.Last, 950) || hot.LastStep != 200 {
		t.Errorf("hot: %+v, want a pass at 0.95", hot)
	}
	if !near(hot.Fresh, 1000) || !near(hot.FreshRatio, 0.95) {
		t.Errorf("hot against fresh tables: %+v, want 950/1000", hot)
	}
	if zipf.Workload != "zipf" || zipf.Pass || !near(zipf.Ratio, 0.85) || !near(zipf.P99Growth, 1000/850.0) || !near(zipf.FreshRatio, 1) {
		t.Errorf("zipf: %+v, want a miss at 0.85", zipf)
	}

	s = soakFixture(1000, 1000)
	s.TimedOut = true
	s.judge()
	for _, tg := range s.Targets {
		if tg.Pass || !strings.Contains(tg.Reason, "deadline") {
			t.Errorf("timed out, %s: %+v, want a miss that says so", tg.Workload, tg)
		}
	}

	one := &SoakResults{Orders: 100, Step: 100, Steps: soakSteps([]SoakChunk{{Workload: "hot", To: 100, Accepted: 100, Seconds: 1}}, 100, 100, soakWorkloads)}
	one.judge()
	if one.Targets[0].Pass || one.Targets[0].Reason == "" {
		t.Errorf("one step: %+v, want a miss: nothing to compare", one.Targets[0])
	}
}

// The section states the target per workload and a row per step; written in
// place, it leaves the rest of the report as it was, and -render draws it again
// from soak.json.
func TestSoakReport(t *testing.T) {
	s := soakFixture(950, 850)
	var b bytes.Buffer
	s.markdown(&b, "benchmarks")
	md := b.String()
	for _, want := range []string{
		"## Soak\n",
		"**Target: the last 100 orders at least 90% of the first 100's orders/s.**",
		"| hot | 1000 orders/s | 950 orders/s | 0.95 | 100 → 105 ms | pass | 1000 orders/s | 0.95 |",
		"| zipf | 1000 orders/s | 850 orders/s | 0.85 | 100 → 118 ms | **miss** | 850 orders/s | 1.00 |",
		"| 0 – 100 | 1000 | 100 ms | 1000 | 100 ms | 1.0 |",
		"| 100 – 200 | 950 | 105 ms | 850 | 118 ms | 2.0 |",
		"(benchmarks/soak.png)",
		"| `orders` | 200 | 1.0 MiB | 0 | 2 | 0 | 0 |",
		"Orders counted in the table at the end: 200 (the chunks' accepted orders add up to 200)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "Autovacuum is off") {
		t.Error("autovacuum on, said off")
	}

	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "benchmarks"), markdown: filepath.Join(dir, "BENCHMARKS.md")}
	report := "# B\n\n## Soak\n\nold\n\n## The strategies\n\nkept\n"
	if err := os.WriteFile(o.markdown, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := s.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(o.markdown); strings.Contains(string(got), "\nold\n") || !strings.HasSuffix(string(got), "\n## The strategies\n\nkept\n") {
		t.Errorf("written in place:\n%s", got)
	}
	// A full report rewrites the file without the section: it comes back
	// from soak.json, as -render puts it.
	if err := os.WriteFile(o.markdown, []byte("# B\n\n## The strategies\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerender(soakJSON(o.out), o, &out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	s.markdown(&b, o.out)
	var issue bytes.Buffer
	in, err := loadIssueInputs(o.out, issueInputs{s: s})
	if err != nil {
		t.Fatal(err)
	}
	issueMarkdown(&issue, in) // the issue's targets lead the report
	if want := "# B\n\n" + issue.String() + "\n" + b.String() + "\n## The strategies\n\nkept\n"; string(got) != want {
		t.Errorf("report:\n got %q\nwant %q", got, want)
	}
	if fi, err := os.Stat(filepath.Join(o.out, "soak.png")); err != nil || fi.Size() == 0 {
		t.Errorf("soak.png: %v", err)
	}
	if !strings.Contains(out.String(), "target zipf: last/first 0.85") {
		t.Errorf("summary:\n%s", out.String())
	}
}

// A chunk is half a step at the workload's last rate, within the bounds; the
// first, at no known rate, is the probe.
func TestChunkLength(t *testing.T) {
	for _, c := range []struct {
		n    int64
		rate float64
		want time.Duration
	}{
		{50_000, 0, soakProbe},
		{50_000, 2500, 20 * time.Second},
		{50_000, 500, soakMaxChunk},
		{1_000, 2500, soakMinChunk},
		{50_000, 3000, 16700 * time.Millisecond},
	} {
		if got := chunkLength(c.n, c.rate); got != c.want {
			t.Errorf("%d orders at %.0f/s: %s, want %s", c.n, c.rate, got, c.want)
		}
	}
}

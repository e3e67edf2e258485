package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// synthetic is a run of two rounds of lock-batch and db-atomic on the hot SKU at
// 16 and 256 VUs, with the ceiling.
func synthetic() *Results {
	r := &Results{Profile: Profile{Name: "test", Duration: time.Second, Repeats: 2, VUs: []int{16, 256}},
		Replicas: 3, Default: "lock-batch", PgBench: []float64{900, 1000, 1100},
		RSS:     map[string]int64{"lock-batch": 60 << 20, "db-atomic": 62 << 20},
		Memory:  map[string]Memory{"lock-batch": {RssAnon: 24 << 20, RssFile: 36 << 20}, "db-atomic": {RssAnon: 41 << 20, RssFile: 20 << 20}},
		Sellout: map[string]Run{},
		CPUProfile: &CPUProfile{Strategy: "lock-batch", Workload: "hot", VUs: 64, Seconds: 10, File: "cpu-lock-batch-hot.pprof",
			Top: "cpu-lock-batch-hot.txt", OrdersPerSec: 4000, CPUPerOrder: 300e-6}}
	add := func(s string, vus int, ops, p99 []float64, cpu CPU) {
		for i := range ops {
			r.Runs = append(r.Runs, Run{Strategy: s, Round: i, Workload: "hot", VUs: vus, Accepted: int64(ops[i] * 10),
				Seconds: 10, OrdersPerSec: ops[i], P99: p99[i], Consistent: true, CPU: cpu, RedisCmds: 100, DBWriteTxs: 10})
		}
	}
	add("lock-batch", 16, []float64{1000, 1200}, []float64{20, 30}, CPU{Replicas: 1, Redis: 0.5, Postgres: 0.5})
	add("lock-batch", 256, []float64{3000, 3400}, []float64{80, 90}, CPU{Replicas: 2, Redis: 1, Postgres: 1})
	add("db-atomic", 16, []float64{900, 1100}, []float64{15, 25}, CPU{Replicas: 1, Redis: 0, Postgres: 4})
	add("db-atomic", 256, []float64{500, 600}, []float64{900, 1000}, CPU{Replicas: 1, Redis: 0, Postgres: 2})
	for i, rps := range []float64{6000, 7000} {
		r.CeilingRuns = append(r.CeilingRuns, Run{Strategy: "ceiling", Workload: "ceiling", Round: i, VUs: 256, OrdersPerSec: rps, P99: 10})
	}
	r.Sellout["lock-batch"] = Run{Strategy: "lock-batch", Accepted: 300, Consistent: true}
	r.Sellout["db-atomic"] = Run{Strategy: "db-atomic", Accepted: 300, Consistent: true}
	r.summarize()
	return r
}

func TestSummarizeKeepsMediansSpreadCeilingAndCosts(t *testing.T) {
	r := synthetic()
	p, ok := r.point("lock-batch", "hot", 256)
	if !ok {
		t.Fatal("no point for lock-batch hot 256")
	}
	if p.OrdersPerSec != 3200 || p.OrdersMin != 3000 || p.OrdersMax != 3400 || p.P99 != 85 || p.P99Max != 90 {
		t.Fatalf("point %+v", p)
	}
	if got := p.Spread(); got != 200.0/3200 {
		t.Fatalf("spread %v, want %v", got, 200.0/3200)
	}
	c, ok := r.ceilingAt(256)
	if !ok || c.ReqsPerSec != 6500 || c.Min != 6000 || c.Max != 7000 {
		t.Fatalf("ceiling %+v, %v", c, ok)
	}
	if _, ok := r.ceilingAt(16); ok {
		t.Fatal("a ceiling at 16 VUs that was never measured")
	}
	// lock-batch on hot: 4 runs of 2 s + 2 s + ... CPU over 2*(10000+12000)+... accepted.
	cost, ok := r.cost("lock-batch", "hot")
	if !ok {
		t.Fatal("no cost for lock-batch hot")
	}
	accepted := 10000.0 + 12000 + 30000 + 34000
	if want := (2*2 + 2*4) / accepted; abs(cost.CPU.Total()-want) > 1e-12 {
		t.Fatalf("cpu per order %v, want %v", cost.CPU.Total(), want)
	}
	if want := 400 / accepted; abs(cost.RedisPerOrder-want) > 1e-12 {
		t.Fatalf("redis per order %v, want %v", cost.RedisPerOrder, want)
	}
}

func abs(x float64) float64 { return max(x, -x) }

func TestJudgeMeetsAndMisses(t *testing.T) {
	r := synthetic()
	verdict := map[string]bool{}
	for _, tg := range r.Targets {
		verdict[tg.What] = tg.Pass
	}
	want := map[string]bool{
		// 1100 vs 1000 orders/s, but p99 25 vs 20 ms: the default's p99 is worse.
		"hot, 16 VUs: the default (lock-batch) at least the best other safe strategy, orders/s and p99":                     false,
		"hot, 256 VUs: the default (lock-batch) at least the best other safe strategy, orders/s and p99":                    true,
		"hot SKU, 256 VUs: the default at least 3× pgbench's one-row-per-commit tps":                                        true,  // 3200 vs 3000
		"hot SKU, 256 VUs: the default at least 50% of the ceiling (GET /healthz, same replicas, balancer, generator, VUs)": false, // 3200 vs 3250
		"hot, 256 VUs: the default's p99 under 100 ms":                                                                      true,
		"hot: the default's CPU per accepted order (replicas, Redis, PostgreSQL) at most db-atomic's":                       true,
		"every replica's peak RSS under 64 MiB":                                                                             true,
		"every replica's peak RssAnon under 40 MiB":                                                                         false, // db-atomic's 41 MiB
		"lock-batch: zero units oversold, I1 holds, in every run and the sell-out":                                          true,
	}
	for what, pass := range want {
		got, ok := verdict[what]
		if !ok {
			t.Errorf("no target %q; have %v", what, verdict)
			continue
		}
		if got != pass {
			t.Errorf("%q: pass %v, want %v", what, got, pass)
		}
	}
}

func TestReportAndChartsFromResults(t *testing.T) {
	r := synthetic()
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "out"), markdown: filepath.Join(dir, "BENCHMARKS.md"), workloads: workloads[:1]}
	if err := r.write(o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "throughput.png", "latency.png", "cpu.png"} {
		if st, err := os.Stat(filepath.Join(o.out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ceiling: GET /healthz |", "3200/s ±6%, p99 85 ms", "| lock-batch | hot | ", "cpu.png", "**miss**",
		"| lock-batch | 300 / 0 | 60.0 MiB | 24.0 MiB (RssFile 36.0 MiB) |",
		"| every replica's peak RssAnon under 40 MiB | 41.0 MiB (RssFile 20.0 MiB) at most (db-atomic) | **miss** |",
		"[" + o.out + "/cpu-lock-batch-hot.pprof](" + o.out + "/cpu-lock-batch-hot.pprof)",
		"[" + o.out + "/cpu-lock-batch-hot.txt](" + o.out + "/cpu-lock-batch-hot.txt)",
		"`go tool pprof -http=: " + o.out + "/cpu-lock-batch-hot.pprof`"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// A results.json written before RssAnon and the CPU profile were measured still
// renders: the new columns say they were not.
func TestReportFromResultsBeforeMemoryAndProfile(t *testing.T) {
	r := synthetic()
	r.Memory, r.CPUProfile = nil, nil
	for i := range r.Runs {
		r.Runs[i].Memory = Memory{}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"peak_rss_anon"`, `"cpu_profile"`, `"memory":{`, `"rss_anon_bytes"`} {
		if strings.Contains(string(b), key) {
			t.Fatalf("an old results.json has no %s", key)
		}
	}
	var old Results
	if err := json.Unmarshal(b, &old); err != nil {
		t.Fatal(err)
	}
	old.summarize()
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "out"), markdown: filepath.Join(dir, "BENCHMARKS.md"), workloads: workloads[:1]}
	if err := old.write(o); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| lock-batch | 300 / 0 | 60.0 MiB | " + fmtMiB(0) + " |",
		"| every replica's peak RssAnon under 40 MiB | not measured | **miss** |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(string(md), ".pprof") {
		t.Error("the report links a profile that was not taken")
	}
}

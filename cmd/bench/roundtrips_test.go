package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// The replicas' count is read from Prometheus's text format; a build without
// it says so.
func TestParseRoundTrips(t *testing.T) {
	n, err := parseRoundTrips(strings.NewReader("# HELP stockguard_redis_round_trips_total x\n# TYPE stockguard_redis_round_trips_total counter\n" +
		"stockguard_redis_round_trips_total_other 3\nstockguard_redis_round_trips_total 1.234567e+06\ngo_goroutines 9\n"))
	if err != nil || n != 1234567 {
		t.Fatalf("got %d, %v; want 1234567", n, err)
	}
	if _, err := parseRoundTrips(strings.NewReader("go_goroutines 9\n")); !errors.Is(err, errNoRoundTrips) {
		t.Fatalf("got %v, want errNoRoundTrips", err)
	}
}

// Round trips per order are over the runs that measured them; the issue's row
// judges lock-batch's on zipf and multi, and a results.json without them
// shows a dash and the commands.
func TestRoundTripsPerOrder(t *testing.T) {
	r := &Results{Default: "lock-batch", Profile: Profile{VUs: []int{64}}}
	for _, w := range []string{"zipf", "multi"} {
		r.Runs = append(r.Runs, Run{Strategy: "lock-batch", Workload: w, VUs: 64, Accepted: 1000, RedisCmds: 9000, RedisTrips: 1500, Consistent: true},
			Run{Strategy: "lock-batch", Workload: w, VUs: 64, Accepted: 1000, RedisCmds: 9000, Consistent: true}) // a run not measured
	}
	r.summarize()
	c, ok := r.cost("lock-batch", "multi")
	if !ok || c.TripsPerOrder != 1.5 || c.RedisPerOrder != 9 {
		t.Fatalf("cost %+v", c)
	}
	row := findRow(t, issueRows(issueInputs{r: r}), "Redis round trips")
	if row.Now != "1.50 / 1.50 (commands: 9.00 / 9.00)" || row.Mark != "pass" {
		t.Errorf("row %+v", row)
	}
	for i := range r.Runs {
		r.Runs[i].RedisTrips = 0
	}
	r.summarize()
	row = findRow(t, issueRows(issueInputs{r: r}), "Redis round trips")
	if row.Now != "– (commands: 9.00 / 9.00)" || row.Mark != notMeasured {
		t.Errorf("row without round trips %+v", row)
	}
	var b bytes.Buffer
	r.markdown(&b, options{out: "benchmarks"}, issueInputs{})
	if !strings.Contains(b.String(), "| lock-batch | multi | 0 + 0 + 0 = **0** | 9.00 | – | 0.000 |") {
		t.Errorf("the cost table:\n%s", b.String())
	}
}

package main

import (
	"errors"
	"testing"
	"time"
)

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		metric, expr string
		agg, op      string
		p, value     float64
	}{
		{"http_req_duration", "p(95)<200ms", "p", "<", 95, 200},
		{"http_req_duration", "p(99.9) <= 1.5s", "p", "<=", 99.9, 1500},
		{"http_req_duration", "avg<500us", "avg", "<", 0, 0.5},
		{"http_req_duration", "med<20", "med", "<", 0, 20},
		{"http_req_failed", "rate<0.01", "rate", "<", 0, 0.01},
		{"oversold", "count==0", "count", "==", 0, 0},
		{"checks", "rate>0.99", "rate", ">", 0, 0.99},
		{"http_reqs", "rate>=100", "rate", ">=", 0, 100},
		{"vus", "max!=0", "max", "!=", 0, 0},
	} {
		th, err := ParseThreshold(tc.metric, tc.expr)
		if err != nil {
			t.Errorf("%s %q: %v", tc.metric, tc.expr, err)
			continue
		}
		if th.Agg != tc.agg || th.Op != tc.op || th.P != tc.p || th.Value != tc.value {
			t.Errorf("%s %q: got %+v", tc.metric, tc.expr, th)
		}
	}
}

func TestParseThresholdRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ metric, expr string }{
		{"http_req_duration", "p95<200ms"},       // no parentheses
		{"http_req_duration", "p(95)<"},          // no value
		{"http_req_duration", "p(0)<200"},        // no such percentile
		{"http_req_duration", "p(101)<200"},      // nor this one
		{"http_req_duration", "rate<0.1"},        // not a rate
		{"http_req_duration", "p(95)<200 ms ms"}, // trailing junk
		{"http_req_failed", "rate<1ms"},          // a unit on a rate
		{"oversold", "count=0"},                  // not an operator
		{"oversold", "avg==0"},                   // not a counter aggregation
		{"no_such_metric", "count==0"},
		{"checks", ""},
	} {
		if _, err := ParseThreshold(tc.metric, tc.expr); !errors.Is(err, ErrThreshold) {
			t.Errorf("%s %q: got %v, want ErrThreshold", tc.metric, tc.expr, err)
		}
	}
}

func TestThresholdsEvaluate(t *testing.T) {
	s := &Summary{Duration: 10 * time.Second, reqDur: newHist(), iterDur: newHist(), Reqs: 1000, Failed: 5, Checks: 100, ChecksFail: 2}
	for v := int64(1); v <= 100; v++ {
		_ = s.reqDur.RecordValue(v * 1000) // 1ms .. 100ms
	}
	s.Audit.Oversold = 3
	for _, tc := range []struct {
		metric, expr string
		pass         bool
	}{
		{"http_req_duration", "p(95)<200ms", true},
		{"http_req_duration", "p(95)<50ms", false},
		{"http_req_duration", "max<=101ms", true},
		{"http_req_failed", "rate<0.01", true},
		{"http_req_failed", "rate<0.001", false},
		{"checks", "rate>0.99", false},
		{"http_reqs", "rate>=100", true},
		{"oversold", "count==0", false},
	} {
		th, err := ParseThreshold(tc.metric, tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		if ok, v := th.Evaluate(s); ok != tc.pass {
			t.Errorf("%s %s: pass=%v (value %v), want %v", tc.metric, tc.expr, ok, v, tc.pass)
		}
	}
}

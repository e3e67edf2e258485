package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The order figures come from POST /v1/orders only: not from its GET (the
// same path), nor from /v1/orders/:id.
func TestParseOrderMetrics(t *testing.T) {
	text := `# HELP stockguard_http_requests_total HTTP requests by route, method and status.
# TYPE stockguard_http_requests_total counter
stockguard_http_requests_total{method="POST",route="/v1/orders",status="201"} 40
stockguard_http_requests_total{method="POST",route="/v1/orders",status="409"} 2
stockguard_http_requests_total{method="GET",route="/v1/orders",status="200"} 7
stockguard_http_requests_total{method="POST",route="/v1/orders/:id/cancel",status="200"} 5
stockguard_http_request_duration_seconds_bucket{route="/v1/orders",le="0.001"} 3
stockguard_http_request_duration_seconds_sum{route="/v1/orders"} 2.5
stockguard_http_request_duration_seconds_count{route="/v1/orders"} 49
stockguard_http_request_duration_seconds_sum{route="/v1/orders/:id"} 9
`
	c, err := parseOrderMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !c.ok || c.reqs != 42 || c.latSum != 2.5 || c.count != 49 {
		t.Fatalf("got %+v; want 42 requests, sum 2.5 s, count 49", c)
	}
	if c, err := parseOrderMetrics(strings.NewReader("go_goroutines 7\n")); err != nil || c.ok {
		t.Fatalf("no order metrics: got %+v, %v; want not ok", c, err)
	}
}

// Rates and latencies are over windows of rateWindow or more; a replica that
// did not answer a sample leaves a gap; the stock starts at what was stocked.
func TestSeries(t *testing.T) {
	s := &sampler{replicas: []string{"a", "b"}}
	for i := range 11 { // every 50 ms, 2 requests of 10 ms per sample on a, 1 of 30 ms on b
		n := float64(i)
		sm := sample{at: time.Duration(i) * sampleEvery, left: int64(100 - 10*i), haveLeft: i > 0,
			replicas: []replicaCounters{{ok: true, reqs: 2 * n, latSum: 0.02 * n, count: 2 * n},
				{ok: i != 7, reqs: n, latSum: 0.03 * n, count: n}}}
		s.samples = append(s.samples, sm)
	}
	var result roundResult
	result.Audit.Stocked = 100
	r := s.series("unsafe", result)
	if len(r.Left) != 11 || r.Left[0] != (point{0, 100}) || r.Left[10].V != 0 {
		t.Fatalf("stock left %v; want 100 at 0 then every sample's", r.Left)
	}
	// The first window ends at the sample 250 ms in: samples 5..10.
	if len(r.Rate[0]) != 6 || len(r.Latency[0]) != 6 {
		t.Fatalf("replica a: %d rates, %d latencies; want 6", len(r.Rate[0]), len(r.Latency[0]))
	}
	for k, want := range []struct{ rate, ms float64 }{{40, 10}, {20, 30}} {
		for i := range r.Rate[k] {
			if math.Abs(r.Rate[k][i].V-want.rate) > 1e-6 || math.Abs(r.Latency[k][i].V-want.ms) > 1e-6 {
				t.Fatalf("replica %d: %v req/s, %v ms; want %v and %v", k, r.Rate[k][i], r.Latency[k][i], want.rate, want.ms)
			}
		}
	}
	if len(r.Rate[1]) >= len(r.Rate[0]) {
		t.Fatalf("replica b missed sample 7 but has %d rates", len(r.Rate[1]))
	}
}

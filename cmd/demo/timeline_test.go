package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// The figures come from POST on the route only: not from its GET (the same
// path), nor from route/:id; answers are counted by kind: 201, 409, other.
func TestParseMetrics(t *testing.T) {
	text := `# HELP stockguard_http_requests_total HTTP requests by route, method and status.
# TYPE stockguard_http_requests_total counter
stockguard_http_requests_total{method="POST",route="/v1/orders",status="201"} 40
stockguard_http_requests_total{method="POST",route="/v1/orders",status="409"} 2
stockguard_http_requests_total{method="POST",route="/v1/orders",status="503"} 3
stockguard_http_requests_total{method="GET",route="/v1/orders",status="200"} 7
stockguard_http_requests_total{method="POST",route="/v1/orders/:id/cancel",status="200"} 5
stockguard_http_requests_total{method="POST",route="/v1/reservations",status="201"} 11
stockguard_http_requests_total{method="POST",route="/v1/reservations",status="409"} 13
stockguard_http_requests_total{method="POST",route="/v1/reservations/:id/confirm",status="201"} 4
stockguard_http_request_duration_seconds_bucket{route="/v1/orders",le="0.001"} 3
stockguard_http_request_duration_seconds_sum{route="/v1/orders"} 2.5
stockguard_http_request_duration_seconds_count{route="/v1/orders"} 49
stockguard_http_request_duration_seconds_sum{route="/v1/orders/:id"} 9
`
	c, err := parseMetrics(strings.NewReader(text), ordersRoute)
	if err != nil {
		t.Fatal(err)
	}
	if !c.ok || c.created != 40 || c.refused != 2 || c.other != 3 || c.latSum != 2.5 || c.count != 49 {
		t.Fatalf("orders: got %+v; want 40 placed, 2 refused, 3 other, sum 2.5 s, count 49", c)
	}
	if c, err = parseMetrics(strings.NewReader(text), holdsRoute); err != nil || !c.ok || c.created != 11 || c.refused != 13 || c.other != 0 {
		t.Fatalf("holds: got %+v, %v; want 11 held, 13 refused, 0 other", c, err)
	}
	if c, err := parseMetrics(strings.NewReader("go_goroutines 7\n"), ordersRoute); err != nil || c.ok {
		t.Fatalf("no order metrics: got %+v, %v; want not ok", c, err)
	}
}

// Answers and latencies are over windows of rateWindow or more; answers are
// summed over the replicas, sales and refusals apart, and a window in which a
// replica did not answer has no answers point (the sum would dip) while the
// other replica keeps its latency; the stock starts at what was stocked.
func TestSeries(t *testing.T) {
	s := &sampler{replicas: []string{"a", "b"}}
	for i := range 11 { // every 50 ms: a places 2 orders of 10 ms, b refuses 1 of 30 ms and answers 1 other of 30 ms
		n := float64(i)
		sm := sample{at: time.Duration(i) * sampleEvery, stock: client.Stock{Stocked: 100, Sold: 10 * i}, haveStock: i > 0,
			replicas: []replicaCounters{{ok: true, created: 2 * n, latSum: 0.02 * n, count: 2 * n},
				{ok: i != 7, refused: n, other: n, latSum: 0.06 * n, count: 2 * n}}}
		s.samples = append(s.samples, sm)
	}
	var result roundResult
	result.Audit.Stocked = 100
	r := s.series("unsafe", result)
	if len(r.Left) != 11 || r.Left[0] != (point{0, 100}) || r.Left[10].V != 0 {
		t.Fatalf("stock left %v; want 100 at 0 then every sample's", r.Left)
	}
	// The first window ends at the sample 250 ms in: samples 5..10; sample 7
	// misses b, and so do the windows that start or end at it.
	if len(r.Latency[0]) != 6 {
		t.Fatalf("replica a: %d latencies; want 6", len(r.Latency[0]))
	}
	if n := len(r.Answers.Created); n == 0 || n >= 6 || n != len(r.Answers.Refused) || n != len(r.Answers.Other) {
		t.Fatalf("%d, %d and %d answers points; want as many of each, fewer than 6 (b missed sample 7)",
			len(r.Answers.Created), len(r.Answers.Refused), len(r.Answers.Other))
	}
	for i := range r.Answers.Created {
		if got := []float64{r.Answers.Created[i].V, r.Answers.Refused[i].V, r.Answers.Other[i].V}; math.Abs(got[0]-40) > 1e-6 ||
			math.Abs(got[1]-20) > 1e-6 || math.Abs(got[2]-20) > 1e-6 {
			t.Fatalf("answers/s %v; want 40 placed, 20 refused, 20 other", got)
		}
	}
	for k, ms := range []float64{10, 30} {
		for _, p := range r.Latency[k] {
			if math.Abs(p.V-ms) > 1e-6 {
				t.Fatalf("replica %d: %v ms; want %v", k, p, ms)
			}
		}
	}
	if len(r.Latency[1]) >= len(r.Latency[0]) {
		t.Fatalf("replica b missed sample 7 but has %d latencies", len(r.Latency[1]))
	}
}

// The carts round's lines: the SKU's units as sampled, where it was read.
func TestStockLines(t *testing.T) {
	s := &sampler{samples: []sample{{at: 0}, {at: sampleEvery, haveStock: true, stock: client.Stock{Available: 1, Reserved: 14, Sold: 5, Stocked: 20}}}}
	got := s.stockLines()
	want := stockLines{Available: []point{{0.05, 1}}, Held: []point{{0.05, 14}}, Sold: []point{{0.05, 5}}}
	if len(got.Available) != 1 || got.Available[0] != want.Available[0] || got.Held[0] != want.Held[0] || got.Sold[0] != want.Sold[0] {
		t.Fatalf("got %+v; want %+v", got, want)
	}
}

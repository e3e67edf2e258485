package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeService answers orders with 409 problem+json after delay, and records how
// many requests are in flight over time.
type fakeService struct {
	delay    time.Duration
	inFlight atomic.Int64
	mu       sync.Mutex
	samples  []sample // in-flight count at each arrival
	start    time.Time
	// slowFrom, slowLeft and slowFor: the first slowLeft requests arriving
	// slowFrom after start take slowFor more.
	slowFrom, slowFor time.Duration
	slowLeft          atomic.Int64
}

type sample struct {
	at       time.Duration
	inFlight int64
}

func (f *fakeService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/audit" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"skus":[],"oversold":0,"consistent":true}`))
		return
	}
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	f.mu.Lock()
	f.samples = append(f.samples, sample{time.Since(f.start), n})
	at := time.Since(f.start)
	f.mu.Unlock()
	if f.delay > 0 {
		time.Sleep(f.delay) // the service's own time per request
	}
	if f.slowFor > 0 && at >= f.slowFrom && f.slowLeft.Add(-1) >= 0 {
		time.Sleep(f.slowFor) // a slow answer that outlasts the run
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusConflict)
	_, _ = w.Write([]byte(`{"type":"/problems/insufficient-stock","title":"Insufficient stock","status":409}`))
}

func (f *fakeService) maxInFlight(from, to time.Duration) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var m int64
	for _, s := range f.samples {
		if s.at >= from && s.at < to {
			m = max(m, s.inFlight)
		}
	}
	return m
}

func runAgainst(t *testing.T, f *fakeService, s Scenario) *Summary {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s.Workload.Prefix = "t"
	cfg := Config{BaseURL: srv.URL, Scenarios: map[string]Scenario{"s": s}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	f.start = time.Now()
	sum, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if got < want*(1-tol) || got > want*(1+tol) {
		t.Errorf("%s: %.1f, want %.1f ± %.0f%%", what, got, want, tol*100)
	}
}

func TestConstantVUsKeepsThatManyInFlight(t *testing.T) {
	f := &fakeService{delay: 5 * time.Millisecond}
	sum := runAgainst(t, f, Scenario{Executor: ConstantVUs, VUs: 8, Duration: Duration(time.Second)})
	if m := f.maxInFlight(0, time.Hour); m != 8 || sum.MaxVUs != 8 {
		t.Fatalf("at most %d requests in flight and %d VUs, want 8 and 8", m, sum.MaxVUs)
	}
	// A closed model: 8 VUs with 5ms answers cannot run more than 1,600 a second.
	if sum.Iterations < 8 || sum.Iterations > 1600+8 {
		t.Fatalf("%d iterations in 1s with 8 VUs and 5ms answers", sum.Iterations)
	}
}

func TestVUsGaugeOfAConstantRunIsItsVUs(t *testing.T) {
	// Half the VUs are still in a request for 3s after the run's 2s are up, the
	// others stop at 2s: a sample taken while they finish would read 4.
	f := &fakeService{delay: 5 * time.Millisecond, slowFrom: 1500 * time.Millisecond, slowFor: 3 * time.Second}
	f.slowLeft.Store(4)
	sum := runAgainst(t, f, Scenario{Executor: ConstantVUs, VUs: 8, Duration: Duration(2 * time.Second)})
	var text bytes.Buffer
	sum.WriteText(&text)
	if g := sum.VUs; g.Value != 8 || g.Min != 8 || g.Max != 8 || !strings.Contains(text.String(), "vus"+strings.Repeat(".", 29)+": 8 min=8 max=8\n") {
		t.Fatalf("vus %d min=%d max=%d for a constant run of 8 VUs:\n%s", g.Value, g.Min, g.Max, text.String())
	}
	if f.slowLeft.Load() >= 0 {
		t.Fatal("the 4 slow answers were not all given before the run ended: nothing outlasted it")
	}
}

func TestVUsGaugeOfARampShowsTheRamp(t *testing.T) {
	// 0 to 8 VUs over 2s, then 8 for 1.5s: about 4 at the first second's sample,
	// 8 at the third's.
	f := &fakeService{delay: 5 * time.Millisecond}
	sum := runAgainst(t, f, Scenario{Executor: RampingVUs, StartVUs: 0,
		Stages: []Stage{{Duration: Duration(2 * time.Second), Target: 8}, {Duration: Duration(1500 * time.Millisecond), Target: 8}}})
	if g := sum.VUs; g.Min >= g.Max || g.Max != 8 || g.Value != 8 {
		t.Fatalf("vus %d min=%d max=%d for a ramp from 0 to 8 held 1.5s; want a min below 8, a max and a last value of 8", g.Value, g.Min, g.Max)
	}
}

func TestConstantArrivalRateHitsItsRate(t *testing.T) {
	f := &fakeService{}
	// As many VUs as iterations may be allocated, so none is dropped even if the
	// machine stalls; every one due is started.
	sum := runAgainst(t, f, Scenario{Executor: ConstantArrivalRate, Rate: 200, Duration: Duration(2 * time.Second), PreAllocatedVUs: 10, MaxVUs: 400})
	within(t, "iterations in 2s at 200/s", float64(sum.Iterations), 400, 0.05)
	if sum.Dropped != 0 {
		t.Errorf("%d dropped with a VU free for every iteration", sum.Dropped)
	}
}

func TestArrivalRateDropsWhatItCannotStart(t *testing.T) {
	// 5 VUs and 100ms answers serve 50 iterations/s; 200/s are due: the rest are
	// dropped, not queued (an open model, no coordinated omission).
	f := &fakeService{delay: 100 * time.Millisecond}
	sum := runAgainst(t, f, Scenario{Executor: ConstantArrivalRate, Rate: 200, Duration: Duration(2 * time.Second), PreAllocatedVUs: 5, MaxVUs: 5})
	within(t, "iterations run or dropped", float64(sum.Iterations+sum.Dropped), 400, 0.05)
	if sum.Iterations > 5*20+5 || sum.Dropped < 250 {
		t.Errorf("%d iterations and %d dropped: 5 VUs at 100ms can run 105 at most", sum.Iterations, sum.Dropped)
	}
	if p := sum.value("iteration_duration", "p", 50); p < 100 {
		t.Errorf("iteration p50 %.1fms is under the service's 100ms", p)
	}
}

func TestRampingVUsRamps(t *testing.T) {
	// Requests of 50ms keep a VU inside one nearly all the time, so that all ten
	// overlap at the end even on a busy machine (with 5ms, 9 did once).
	f := &fakeService{delay: 50 * time.Millisecond}
	sum := runAgainst(t, f, Scenario{Executor: RampingVUs, StartVUs: 0,
		Stages: []Stage{{Duration: Duration(time.Second), Target: 10}, {Duration: Duration(500 * time.Millisecond), Target: 10}}})
	early, late := f.maxInFlight(0, 250*time.Millisecond), f.maxInFlight(1100*time.Millisecond, 1500*time.Millisecond)
	if early > 4 || late != 10 || sum.MaxVUs != 10 {
		t.Fatalf("in flight: %d in the first 250ms, %d at the end, %d VUs at most; want <= 4, 10, 10", early, late, sum.MaxVUs)
	}
}

func TestRampingArrivalRateFollowsItsStages(t *testing.T) {
	f := &fakeService{}
	// 0 to 200/s over 2s, then 200/s for 1s: 200 + 200 iterations.
	sum := runAgainst(t, f, Scenario{Executor: RampingArrivalRate, StartRate: 0, PreAllocatedVUs: 10, MaxVUs: 50,
		Stages: []Stage{{Duration: Duration(2 * time.Second), Target: 200}, {Duration: Duration(time.Second), Target: 200}}})
	within(t, "iterations", float64(sum.Iterations), 400, 0.1)
}

func TestStageValueInterpolates(t *testing.T) {
	st := []Stage{{Duration: Duration(time.Second), Target: 10}, {Duration: Duration(time.Second), Target: 0}}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 0}, {500 * time.Millisecond, 5}, {time.Second, 10}, {1500 * time.Millisecond, 5}, {3 * time.Second, 0}} {
		if got := stageValue(0, st, tc.at); got != tc.want {
			t.Errorf("at %s: %v, want %v", tc.at, got, tc.want)
		}
	}
}

func TestStageIntegralCountsDueIterations(t *testing.T) {
	st := []Stage{{Duration: Duration(2 * time.Second), Target: 200}, {Duration: Duration(time.Second), Target: 200}}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 0}, {time.Second, 50}, {2 * time.Second, 200}, {3 * time.Second, 400}, {4 * time.Second, 600}} {
		if got := stageIntegral(0, st, tc.at); got != tc.want {
			t.Errorf("at %s: %v, want %v", tc.at, got, tc.want)
		}
	}
}

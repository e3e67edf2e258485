package httpapi

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gaugeValue gathers reg and returns its one gauge's value.
func gaugeValue(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v, %d families", err, len(mfs))
	}
	return mfs[0].GetMetric()[0].GetGauge().GetValue()
}

// A scrape never waits for a hanging dependency: it reads the last state, and
// the check it started in the background sets the next one.
func TestDependencyGaugeDoesNotBlockScrapes(t *testing.T) {
	release := make(chan struct{})
	answer := make(chan error, 1)
	g := newDependencyGauge(Dependency{Name: "redis", Check: func(ctx context.Context) error {
		select {
		case <-release:
			return <-answer
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	reg := prometheus.NewRegistry()
	reg.MustRegister(g)

	start := time.Now()
	if v := gaugeValue(t, reg); v != 1 {
		t.Fatalf("before any check: %v, want 1 (up until a check says otherwise)", v)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("a scrape waited %s for a hanging check", took)
	}
	answer <- errors.New("connection refused")
	close(release)
	for deadline := time.Now().Add(10 * time.Second); gaugeValue(t, reg) != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the failed check never showed: still 1 after 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling the gauge, with a deadline
	}
}

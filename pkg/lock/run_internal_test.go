package lock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// oneHolder is the smallest Backend: one process, every call succeeds.
type oneHolder struct{}

func (oneHolder) Obtain(_ context.Context, names []string, _ string, _ time.Duration, block int64) ([]int64, error) {
	tops := make([]int64, len(names))
	for i := range tops {
		tops[i] = block
	}
	return tops, nil
}
func (oneHolder) Renew(context.Context, []string, string, time.Duration) error  { return nil }
func (oneHolder) Held(context.Context, string, string) (bool, error)            { return true, nil }
func (oneHolder) Release(context.Context, []string, string) error               { return nil }
func (oneHolder) Advance(context.Context, string, string, int64) (int64, error) { return 0, nil }

// Work that returns after its lease ended, before the watchdog could say so (a
// process stopped past the lease, then continued: its goroutines race), counts
// as a lost lease and is handed to nobody. The lease's end is moved into the
// past inside the work, so the watchdog's timer, armed for the old end, cannot
// fire first.
func TestWorkPastItsLeaseCountsLost(t *testing.T) {
	m := &lostMetrics{}
	c, err := NewClient(oneHolder{}, &Options{TTL: time.Minute, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	var l *lease
	err = c.Do(context.Background(), []string{"r"}, func(_ context.Context, g *Grant) error {
		l = g.leaseOf[0]
		l.mu.Lock()
		l.validUntil = time.Now().Add(-time.Millisecond)
		l.mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v (the work itself succeeded)", err)
	}
	if got := lostCount(t, m); got != 1 {
		t.Fatalf("leases lost: %v, want 1", got)
	}
	if _, _, lost := l.state(); !lost {
		t.Fatal("the lease that ran out is not marked lost: it could be handed on")
	}
	// A lease that did not run out is not counted.
	if err := c.Do(context.Background(), []string{"r"}, func(context.Context, *Grant) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := lostCount(t, m); got != 1 {
		t.Fatalf("leases lost after a normal hold: %v, want still 1", got)
	}
}

// lostMetrics counts the leases lost, and records nothing else.
type lostMetrics struct {
	NopMetrics
	lost atomic.Int64
}

func (m *lostMetrics) Lost() { m.lost.Add(1) }

func lostCount(t *testing.T, m *lostMetrics) float64 {
	t.Helper()
	return float64(m.lost.Load())
}

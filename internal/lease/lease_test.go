package lease_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/lease"
	"github.com/stockguard/stockguard/internal/orders"
)

// grant holds tokens; Advance moves one past past, or fails when lost.
type grant struct {
	mu     sync.Mutex
	fences orders.Fences
	lost   bool
}

func (g *grant) Fences() orders.Fences {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fences
}

func (g *grant) Advance(_ context.Context, sku string, past int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost {
		return orders.ErrLeaseLost
	}
	g.fences[sku] = past + 1
	return nil
}

// A token the database refuses is advanced past the one it had, once, and
// the write made again with it; a lost lock gets the refusal.
func TestFencedAdvancesPastTheCommittedToken(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	for _, lost := range []bool{false, true} {
		g := &grant{fences: orders.Fences{"job:x": 3}, lost: lost}
		var rejected, writes []int64
		err := lease.Fenced(ctx, g, log, func(string) { rejected = append(rejected, g.Fences()["job:x"]) }, func(f orders.Fences) error {
			writes = append(writes, f["job:x"])
			if f["job:x"] <= 7 {
				return &orders.StaleFenceError{SKU: "job:x", Token: f["job:x"], Last: 7}
			}
			return nil
		})
		switch {
		case !lost && (err != nil || len(writes) != 2 || writes[1] != 8 || len(rejected) != 1):
			t.Fatalf("held: err %v, writes %v, rejected %v; want nil, [3 8], one", err, writes, rejected)
		case lost && (!errors.Is(err, orders.ErrLeaseLost) || len(writes) != 1 || len(rejected) != 0):
			t.Fatalf("lost: err %v, writes %v, rejected %v; want the lease lost after one write", err, writes, rejected)
		}
	}
	if err := lease.Fenced(ctx, nil, log, nil, func(f orders.Fences) error {
		if f != nil {
			t.Errorf("fences %v without a grant", f)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// locker grants the lease to each call after the first busy one, and counts.
type locker struct {
	mu    sync.Mutex
	calls int
}

func (l *locker) WithLocks(ctx context.Context, _ []string, fn func(context.Context, orders.Grant) error) error {
	l.mu.Lock()
	l.calls++
	n := l.calls
	l.mu.Unlock()
	if n == 1 {
		return orders.ErrBusy
	}
	return fn(ctx, &grant{fences: orders.Fences{"job:x": int64(n)}})
}

// A job contends again after another replica led and after it stepped down,
// tells the observer of each lead's start and end, and stops with ctx.
func TestJobLeadsStepsDownAndContendsAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var leading []bool
	leads := 0
	j := lease.Job{Name: "x", Lease: "job:x", Retry: time.Millisecond,
		Leading: func(b bool) { mu.Lock(); leading = append(leading, b); mu.Unlock() },
		Work: func(context.Context, orders.Grant) error {
			leads++
			if leads == 3 {
				cancel()
			}
			return orders.ErrStaleLeader
		}}
	l := &locker{}
	j.Run(ctx, l, slog.New(slog.DiscardHandler))
	if l.calls != 4 || leads != 3 {
		t.Fatalf("%d calls and %d leads; want 4 (one busy) and 3", l.calls, leads)
	}
	if len(leading) != 6 || leading[0] != true || leading[1] != false || leading[5] != false {
		t.Fatalf("leading %v; want true, false three times", leading)
	}
}

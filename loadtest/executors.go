package main

import (
	"context"
	"sync"
	"time"
)

// iterateFunc runs one iteration on a VU; scheduled is when it was due (for the
// arrival-rate executors, latency counts from then).
type iterateFunc func(ctx context.Context, vu *vuStats, scheduled time.Time)

// runScenario runs one scenario's executor until its time is up or ctx ends, and
// returns every VU's stats.
func runScenario(ctx context.Context, s Scenario, lv *live, newVU func() *vuStats, iterate iterateFunc) []*vuStats {
	if d := time.Duration(s.StartTime); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil
		}
	}
	switch s.Executor {
	case ConstantVUs:
		return runVUs(ctx, s.VUs, time.Duration(s.Duration), func(time.Duration) int { return s.VUs }, lv, newVU, iterate)
	case RampingVUs:
		peak := s.StartVUs
		for _, st := range s.Stages {
			peak = max(peak, st.Target)
		}
		return runVUs(ctx, peak, s.total()-time.Duration(s.StartTime), func(el time.Duration) int {
			return int(stageValue(float64(s.StartVUs), s.Stages, el) + 0.5)
		}, lv, newVU, iterate)
	case ConstantArrivalRate:
		perSec := float64(s.Rate) / time.Duration(s.TimeUnit).Seconds()
		return runArrival(ctx, s, time.Duration(s.Duration), func(el time.Duration) float64 { return perSec * el.Seconds() }, lv, newVU, iterate)
	default: // ramping-arrival-rate
		unit := time.Duration(s.TimeUnit).Seconds()
		return runArrival(ctx, s, s.total()-time.Duration(s.StartTime), func(el time.Duration) float64 {
			return stageIntegral(float64(s.StartRate), s.Stages, el) / unit
		}, lv, newVU, iterate)
	}
}

// stageIntegral is the integral of stageValue from 0 to elapsed, in target-seconds:
// for a rate, the iterations due by then.
func stageIntegral(start float64, stages []Stage, elapsed time.Duration) float64 {
	from, sum := start, 0.0
	for _, st := range stages {
		d := time.Duration(st.Duration)
		to := float64(st.Target)
		if elapsed < d {
			at := from + (to-from)*float64(elapsed)/float64(d)
			return sum + (from+at)/2*elapsed.Seconds()
		}
		sum += (from + to) / 2 * d.Seconds()
		elapsed -= d
		from = to
	}
	return sum + from*elapsed.Seconds()
}

// stageValue interpolates linearly between stage targets, from start at 0.
func stageValue(start float64, stages []Stage, elapsed time.Duration) float64 {
	from := start
	for _, st := range stages {
		d := time.Duration(st.Duration)
		if elapsed < d {
			return from + (float64(st.Target)-from)*float64(elapsed)/float64(d)
		}
		elapsed -= d
		from = float64(st.Target)
	}
	return from
}

// gracefulStop is how long iterations in flight at the end of a scenario may
// take to finish, as k6's option of that name (default 30s) allows.
const gracefulStop = 30 * time.Second

// runVUs is the closed model: peak VUs loop iterations; VU i runs while
// i < target(elapsed), so a ramp starts and parks VUs as it goes. No iteration
// starts after d; those running then may finish within gracefulStop.
func runVUs(parent context.Context, peak int, d time.Duration, target func(time.Duration) int, lv *live, newVU func() *vuStats, iterate iterateFunc) []*vuStats {
	ictx, icancel := context.WithTimeout(parent, d+gracefulStop)
	defer icancel()
	ctx, cancel := context.WithTimeout(parent, d)
	defer cancel()
	start := time.Now()
	stats := make([]*vuStats, peak)
	var wg sync.WaitGroup
	// The VUs due at the start count as running before their goroutines are
	// scheduled, so that the vus gauge never samples a constant run half started.
	first := target(0)
	for i := range peak {
		stats[i] = newVU()
		active := i < first
		if active {
			lv.vuDelta(1)
		}
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			defer func() {
				if active {
					lv.vuDelta(-1)
				}
			}()
			for ctx.Err() == nil {
				if i >= target(time.Since(start)) {
					if active {
						active = false
						lv.vuDelta(-1)
					}
					select { // parked: look again at the next tick
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					continue
				}
				if !active {
					active = true
					lv.vuDelta(1)
				}
				iterate(ictx, stats[i], time.Now())
			}
		})
	}
	wg.Wait()
	return stats
}

// runArrival is the open model: iteration k starts when due(t) reaches k,
// whatever the answers' latency; a start that finds no free VU, with maxVUs
// already allocated, is dropped and counted.
func runArrival(ctx context.Context, s Scenario, d time.Duration, due func(time.Duration) float64, lv *live, newVU func() *vuStats, iterate iterateFunc) []*vuStats {
	ictx, icancel := context.WithTimeout(ctx, d+gracefulStop)
	defer icancel()
	free := make(chan *vuStats, s.MaxVUs)
	var all []*vuStats
	for range s.PreAllocatedVUs {
		v := newVU()
		all = append(all, v)
		free <- v
	}
	var wg sync.WaitGroup
	start := time.Now()
	var prev time.Duration
	total := due(d)
	// Iteration k (from 0, as k6 starts one at once) is due when due(t) reaches k;
	// the tolerance keeps the last one from being lost to rounding.
	for k := 0; float64(k) < total-1e-9; k++ {
		if ctx.Err() != nil {
			break
		}
		lo, hi := prev, d // the time iteration k is due: due(t) = k
		for hi-lo > 50*time.Microsecond {
			mid := lo + (hi-lo)/2
			if due(mid) >= float64(k) {
				hi = mid
			} else {
				lo = mid
			}
		}
		prev = hi
		next := start.Add(hi)
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				wg.Wait()
				return all
			case <-t.C:
			}
		}
		scheduled := next
		var vu *vuStats
		select {
		case vu = <-free:
		default:
			if len(all) < s.MaxVUs {
				vu = newVU()
				all = append(all, vu)
			}
		}
		if vu == nil {
			lv.dropped.Add(1)
			continue
		}
		lv.vuDelta(1)
		wg.Go(func() {
			iterate(ictx, vu, scheduled)
			lv.vuDelta(-1)
			free <- vu
		})
	}
	wg.Wait()
	return all
}

package main

import (
	"testing"
	"time"
)

// The sweep's rates come from the orders' completion times: 100/s before
// the holds expire, 50/s while they are swept (from the last reading of
// every hold reserved to the reading of none), 100/s after.
func TestSweepRecord(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	run := OpRun{Seconds: 12}
	for ms := int64(0); ms < 12_000; ms += 10 {
		if ms < 6_000 || ms >= 8_000 || ms%20 == 0 {
			run.Done = append(run.Done, ms*int64(time.Millisecond))
		}
	}
	res := SweepResult{Holds: 1000}
	res.record(run, sweepTimes{start: start, expiry: at(5), full: at(6), first: at(6.25), done: at(8)}, 3*time.Second)
	if res.BeforeS != 3 || res.Before != 100 || res.During != 50 || res.After != 100 || res.Ratio != 0.5 {
		t.Errorf("rates: %+v", res)
	}
	if res.FirstS != 1.25 || res.DoneS != 3 || res.HoldsPerS != 500 {
		t.Errorf("times: first %v, done %v, holds/s %v", res.FirstS, res.DoneS, res.HoldsPerS)
	}
	if res.TimelineFrom != -3 || len(res.Timeline) != 40 || res.Timeline[0] != 100 || res.Timeline[16]+res.Timeline[17] != 100 || res.Timeline[24] != 100 {
		t.Errorf("timeline from %v: %v", res.TimelineFrom, res.Timeline)
	}

	// Timed out: no rate after, no time of the end, no holds/s.
	late := SweepResult{Holds: 1000, TimedOut: true}
	late.record(run, sweepTimes{start: start, expiry: at(5), full: at(6), first: at(6.25), done: at(8)}, 10*time.Second)
	if late.After != 0 || late.DoneS != 0 || late.HoldsPerS != 0 || late.BeforeS != 3.5 {
		t.Errorf("timed out: %+v", late)
	}
}

// A window's rate counts the completions in [from, to); an empty or
// reversed window is 0.
func TestOpRunRate(t *testing.T) {
	start := time.Unix(0, 0)
	r := OpRun{Done: []int64{0, int64(time.Second), int64(2 * time.Second), int64(2 * time.Second)}}
	if got := r.rate(start, start, start.Add(2*time.Second)); got != 1 {
		t.Errorf("got %v, want 1", got)
	}
	if got := r.rate(start, start.Add(2*time.Second), start.Add(3*time.Second)); got != 2 {
		t.Errorf("got %v, want 2", got)
	}
	if got := r.rate(start, start.Add(time.Second), start.Add(time.Second)); got != 0 {
		t.Errorf("empty window: got %v", got)
	}
}

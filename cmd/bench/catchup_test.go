package main

import (
	"testing"
	"time"
)

// The catch-up run's rates come from the orders' completion times around
// the outage: none while NATS is down here, 100/s otherwise; the timeline is
// one rate per catchUpStep and the peaks are the samples' highest.
func TestCatchUpRecord(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	run := OpRun{Seconds: 25, Failed: 2, FailedBy: map[string]int64{"503": 2}}
	for ms := int64(0); ms < 25_000; ms += 10 {
		if ms < 5_000 || ms >= 15_000 {
			run.Done = append(run.Done, ms*int64(time.Millisecond))
		}
	}
	samples := []BacklogSample{{T: 1, DB: 3}, {T: 10, DB: 900, Gauge: 880, OldestS: 5}, {T: 17, DB: 2, Gauge: 2}}
	var res CatchUpResult
	res.record(run, samples, 3, catchUpTimes{start: start, stopped: at(5), restarted: at(15), caught: at(17)})
	if res.Before != 100 || res.During != 0 || res.Catching != 100 || res.After != 100 {
		t.Errorf("rates before %v, during %v, catching %v, after %v; want 100, 0, 100, 100", res.Before, res.During, res.Catching, res.After)
	}
	if !res.CaughtUp || res.CatchUpS != 2 || res.BeforeS != 3.5 || res.StopAtS != 5 || res.RestartAtS != 15 || res.Steady != 3 {
		t.Errorf("times %+v", res)
	}
	if res.PeakDB != 900 || res.PeakGauge != 880 || res.PeakOldestS != 5 || res.Failed != 2 || len(res.Samples) != 3 {
		t.Errorf("peaks and failures %+v", res)
	}
	if len(res.Timeline) != 50 || res.Timeline[0] != 100 || res.Timeline[10] != 0 || res.Timeline[49] != 100 {
		t.Errorf("timeline %v", res.Timeline)
	}

	var missed CatchUpResult
	missed.record(run, samples, 3, catchUpTimes{start: start, stopped: at(5), restarted: at(15)})
	if missed.CaughtUp || missed.Catching != 0 || missed.After != 0 {
		t.Errorf("not caught up: %+v", missed)
	}
}

// The steady backlog is the highest reading in the window, -1 without one.
func TestSteadyBacklog(t *testing.T) {
	samples := []BacklogSample{{T: 2, DB: 9}, {T: 2.5, DB: 4}, {T: 3, DB: 7}, {T: 5, DB: 100}}
	if got := steadyBacklog(samples, 2.5, 5); got != 7 {
		t.Errorf("got %d, want 7", got)
	}
	if got := steadyBacklog(samples, 6, 9); got != -1 {
		t.Errorf("got %d, want -1", got)
	}
}

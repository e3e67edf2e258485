package main

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1µs to 60s, to 2 significant
// digits (1% error): small enough to keep one histogram per VU at 1,000 VUs.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 2) }

// vuStats is what one VU records, without locks; merged at the end.
type vuStats struct {
	reqDur, iterDur                  *hdrhistogram.Histogram
	reqs, failed, checks, checksFail int64
	iterations                       int64
	accepted, refused, cancelled     int64
	abandoned                        int64
	soldUnits                        map[string]int64 // 201 answers, net of cancels
}

func newVUStats() *vuStats {
	return &vuStats{reqDur: newHist(), iterDur: newHist(), soldUnits: map[string]int64{}}
}

// second is one second of the run, for the live line and the chart.
type second struct {
	reqs, failed int64
	lat          *hdrhistogram.Histogram
}

// timeline keeps per-second throughput and latency.
type timeline struct {
	start time.Time
	mu    sync.Mutex
	secs  []second
}

func (tl *timeline) record(at time.Time, d time.Duration, failed bool) {
	i := int(at.Sub(tl.start) / time.Second)
	if i < 0 {
		i = 0
	}
	tl.mu.Lock()
	for len(tl.secs) <= i {
		tl.secs = append(tl.secs, second{lat: newHist()})
	}
	s := &tl.secs[i]
	s.reqs++
	if failed {
		s.failed++
	}
	_ = s.lat.RecordValue(max(1, d.Microseconds()))
	tl.mu.Unlock()
}

// live counters for the progress line.
type live struct {
	reqs, failed atomic.Int64
	vus          atomic.Int64
	maxVUs       atomic.Int64
	dropped      atomic.Int64
	bytesIn      atomic.Int64
	bytesOut     atomic.Int64
}

func (l *live) vuDelta(d int64) {
	v := l.vus.Add(d)
	for {
		m := l.maxVUs.Load()
		if v <= m || l.maxVUs.CompareAndSwap(m, v) {
			return
		}
	}
}

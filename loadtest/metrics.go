package main

import (
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1µs to 60s, to 2 significant
// digits (1% error), in HDR histograms per shard of VUs, merged at the end.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatency, 2) }

// vuStats is what one VU records without locks (counters, units sold), and
// the shard its latencies go to; merged at the end.
type vuStats struct {
	sh                               *shard
	rng                              *mrand.Rand
	reqs, failed, checks, checksFail int64
	iterations                       int64
	accepted, refused, cancelled     int64
	split                            int64 // lines a 201 allocated from more than one location
	abandoned                        int64
	soldUnits                        map[string]int64 // 201 answers, net of cancels
	unknown                          []pending        // orders whose answer was lost
	cancelsUnknown                   []order          // cancels whose answer was lost
	named                            map[string]*checkCount
	holds                            []*holdRec    // every hold a 201 answered
	holdsUnknown                     []pendingHold // holds whose answer was lost
	holdsRefused                     int64
}

// checkCount is one named check's passes and failures, as k6 lists them.
type checkCount struct {
	Passes int64 `json:"passes"`
	Fails  int64 `json:"fails"`
}

// reqKind names the requests that have their own latency metric.
type reqKind int

const (
	kindOther reqKind = iota
	kindHold
	kindConfirm
	kindRelease
	nKinds
)

// kindMetric is each kind's trend metric, as thresholds and the summary name it.
var kindMetric = [nKinds]string{"", "hold_duration", "confirm_duration", "release_duration"}

// shard holds the latency histograms and the per-second timeline of the VUs
// assigned to it: a fixed number of them whatever the VU count, so 1,000 VUs cost
// no more memory than 16, and VUs rarely wait on one another's lock.
type shard struct {
	mu              sync.Mutex
	reqDur, iterDur *hdrhistogram.Histogram
	byKind          [nKinds]*hdrhistogram.Histogram // made on first use: most runs place orders only
}

// second is one second of the run, for the chart.
type second struct {
	reqs, failed int64
	lat          *hdrhistogram.Histogram
}

const shards = 16

// recorder is every shard, and the timeline: one low-precision histogram per
// second for all VUs, so that a long run costs kilobytes a second, not a shard's
// worth of full histograms.
type recorder struct {
	start  time.Time
	next   atomic.Int64
	shards [shards]shard
	secMu  sync.Mutex
	secs   []second
}

// chartHist is a per-second histogram: 1 significant digit is plenty for a chart.
func chartHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, maxLatency, 1) }

const maxLatency = 60_000_000 // µs

// clamp keeps a value the histograms can hold: a slower answer counts as 60s
// rather than vanish from the percentiles.
func clamp(us int64) int64 { return min(max(1, us), maxLatency) }

func newRecorder() *recorder {
	r := &recorder{start: time.Now()}
	for i := range r.shards {
		r.shards[i].reqDur, r.shards[i].iterDur = newHist(), newHist()
	}
	return r
}

func (r *recorder) newVU() *vuStats {
	n := r.next.Add(1)
	return &vuStats{sh: &r.shards[n%shards], rng: mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), uint64(n))),
		soldUnits: map[string]int64{}}
}

func (r *recorder) request(sh *shard, kind reqKind, at time.Time, d time.Duration, failed bool) {
	i := max(0, int(at.Sub(r.start)/time.Second))
	us := clamp(d.Microseconds())
	sh.mu.Lock()
	_ = sh.reqDur.RecordValue(us)
	if kind != kindOther {
		if sh.byKind[kind] == nil {
			sh.byKind[kind] = newHist()
		}
		_ = sh.byKind[kind].RecordValue(us)
	}
	sh.mu.Unlock()
	r.secMu.Lock()
	for len(r.secs) <= i {
		r.secs = append(r.secs, second{lat: chartHist()})
	}
	sec := &r.secs[i]
	sec.reqs++
	if failed {
		sec.failed++
	}
	_ = sec.lat.RecordValue(us)
	r.secMu.Unlock()
}

func (r *recorder) iteration(sh *shard, d time.Duration) {
	sh.mu.Lock()
	_ = sh.iterDur.RecordValue(clamp(d.Microseconds()))
	sh.mu.Unlock()
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

// vuGauge is the VUs running, sampled once a second as k6 samples its vus
// metric: the last sample, the fewest and the most.
type vuGauge struct {
	Value, Min, Max int64
	samples         int
}

// add takes one sample.
func (g *vuGauge) add(v int64) {
	if g.samples == 0 || v < g.Min {
		g.Min = v
	}
	g.Max = max(g.Max, v)
	g.Value = v
	g.samples++
}

// sampleVUs samples lv's VUs each second of the scenarios' time, the first
// scheduled seconds from start, until stopped. A tick after that time is not a
// sample: the VUs then are only finishing their last iterations (in the graceful
// stop), one by one, and a constant run of 64 VUs would read as fewer. A run
// shorter than a second has no sample; its gauge is then the most VUs it had.
func sampleVUs(lv *live, start time.Time, scheduled time.Duration) (stop func() vuGauge) {
	done := make(chan struct{})
	out := make(chan vuGauge, 1)
	go func() {
		var g vuGauge
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				if g.samples == 0 {
					m := lv.maxVUs.Load()
					g = vuGauge{Value: m, Min: m, Max: m}
				}
				out <- g
				return
			case <-tick.C:
			}
			// Read before the clock: a count read while still in time was read
			// before any scenario's deadline, so before any VU began to stop.
			v := lv.vus.Load()
			if time.Since(start) < scheduled {
				g.add(v)
			}
		}
	}()
	return func() vuGauge { close(done); return <-out }
}

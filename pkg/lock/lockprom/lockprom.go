// Package lockprom records what a lock.Client does as Prometheus metrics: its
// Metrics are both the lock.Metrics a Client takes and the collectors a
// registry gathers. The lock package and its backends import no metrics
// library; a program that wants Prometheus imports this adapter.
package lockprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Metrics are the Prometheus collectors of a lock.Client. Create them with New,
// pass them in lock.Options.Metrics (and, for the Redis backend's replica
// waits, in redislease.Options.Metrics, which redislease.NewClient does) and
// register them once with a registry; several Clients may share one Metrics. A
// nil *Metrics records nothing.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	failures     *prometheus.CounterVec
	contended    prometheus.Counter
	waiting      prometheus.Gauge
	handoffs     *prometheus.CounterVec
	attempts     *prometheus.CounterVec
	wakeups      *prometheus.CounterVec
	wait         prometheus.Histogram
	hold         prometheus.Histogram
	renewals     *prometheus.CounterVec
	leasesLost   prometheus.Counter
	replicaWaits *prometheus.CounterVec
}

var (
	_ prometheus.Collector = (*Metrics)(nil)
	_ lock.Metrics         = (*Metrics)(nil)
)

// New returns the collectors, their names prefixed with namespace
// (for example "stockguard" gives stockguard_lock_acquisitions_total).
func New(namespace string) *Metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Subsystem: "lock", Name: name, Help: help}
	}
	buckets := prometheus.ExponentialBuckets(0.0001, 2.5, 12) // 100µs .. ~6s
	return &Metrics{
		acquisitions: newCounterVec(opts("acquisitions_total",
			"Grants, by how the lease was had: obtained (from the lock service) or handoff (passed on locally)."), "how", "obtained", "handoff"),
		failures: newCounterVec(opts("failures_total",
			"Calls that got no grant, by reason: timeout (the caller's context ended) or error."), "reason", "timeout", "error"),
		contended: prometheus.NewCounter(prometheus.CounterOpts(opts("contended_total",
			"Grants that had to wait for another holder, in this process or another."))),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts(opts("waiting",
			"Callers acquiring now: queued locally, waiting for the lock service or obtaining."))),
		handoffs: newCounterVec(opts("handoffs_total",
			"Leases passed on to the next local holder, by result: ok, or refused (the lease was no longer ours)."), "result", "ok", "refused"),
		attempts: newCounterVec(opts("obtain_attempts_total",
			"Attempts to obtain a lease from the lock service, by result: ok, busy or error."), "result", "ok", "busy", "error"),
		wakeups: newCounterVec(opts("wakeups_total",
			"Retries of a waiting caller, by cause: release (announced) or poll (safety net)."), "cause", "release", "poll"),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "lock",
			Name: "wait_seconds", Help: "Time from the call to the grant.", Buckets: buckets}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "lock",
			Name: "hold_seconds", Help: "Time the caller's function held the grant.", Buckets: buckets}),
		renewals: newCounterVec(opts("renewals_total",
			"Watchdog renewals, by result: ok, lost (the lock was gone) or error (the lock service failed)."), "result", "ok", "lost", "error"),
		leasesLost: prometheus.NewCounter(prometheus.CounterOpts(opts("leases_lost_total",
			"Grants whose lease was lost while the function ran: its context was cancelled, or the function outlived the lease before the watchdog could say so (its process stopped)."))),
		replicaWaits: newCounterVec(opts("replica_waits_total",
			"Leases that waited for Options.Replicas, by result: ok, or short (too few acknowledged; released)."), "result", "ok", "short"),
	}
}

// newCounterVec returns a counter with one label whose values are exported at 0
// from the start, so that "none yet" and "not exported" look different.
func newCounterVec(o prometheus.Opts, label string, values ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts(o), []string{label})
	for _, val := range values {
		v.WithLabelValues(val)
	}
	return v
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquisitions, m.failures, m.contended, m.waiting, m.handoffs, m.attempts, m.wakeups,
		m.wait, m.hold, m.renewals, m.leasesLost, m.replicaWaits}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// Granted implements lock.Metrics.
func (m *Metrics) Granted(how string, waited bool, wait time.Duration) {
	if m == nil {
		return
	}
	m.acquisitions.WithLabelValues(how).Inc()
	if waited {
		m.contended.Inc()
	}
	m.wait.Observe(wait.Seconds())
}

// Failed implements lock.Metrics.
func (m *Metrics) Failed(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

// Attempt implements lock.Metrics.
func (m *Metrics) Attempt(result string) {
	if m != nil {
		m.attempts.WithLabelValues(result).Inc()
	}
}

// Wakeup implements lock.Metrics.
func (m *Metrics) Wakeup(cause string) {
	if m != nil {
		m.wakeups.WithLabelValues(cause).Inc()
	}
}

// Held implements lock.Metrics.
func (m *Metrics) Held(d time.Duration) {
	if m != nil {
		m.hold.Observe(d.Seconds())
	}
}

// Renewal implements lock.Metrics.
func (m *Metrics) Renewal(result string) {
	if m != nil {
		m.renewals.WithLabelValues(result).Inc()
	}
}

// Lost implements lock.Metrics.
func (m *Metrics) Lost() {
	if m != nil {
		m.leasesLost.Inc()
	}
}

// Waiting implements lock.Metrics.
func (m *Metrics) Waiting(delta int) {
	if m != nil {
		m.waiting.Add(float64(delta))
	}
}

// Handoff implements lock.Metrics.
func (m *Metrics) Handoff(result string) {
	if m != nil {
		m.handoffs.WithLabelValues(result).Inc()
	}
}

// Replicated counts a wait for the Redis backend's Replicas
// (redislease.ReplicaMetrics): ok, or short.
func (m *Metrics) Replicated(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.replicaWaits.WithLabelValues("ok").Inc()
	} else {
		m.replicaWaits.WithLabelValues("short").Inc()
	}
}

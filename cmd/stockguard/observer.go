package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/orders"
)

// observer counts the use case's events as Prometheus metrics.
type observer struct {
	placed        prometheus.Counter
	refused       *prometheus.CounterVec
	fenceRejected *prometheus.CounterVec
	cacheRepaired *prometheus.CounterVec
	holds         *prometheus.CounterVec
	leading       prometheus.Gauge
	sweepRefused  prometheus.Counter
}

var _ orders.Observer = (*observer)(nil)

func newObserver(reg prometheus.Registerer) *observer {
	o := &observer{
		placed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "stockguard", Name: "orders_placed_total",
			Help: "Orders placed."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "orders_refused_total",
			Help: "Orders refused, by reason."}, []string{"reason"}),
		fenceRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "fence_rejections_total",
			Help: "Writes the database refused because a newer lock holder had written (a stale holder)."}, []string{"sku"}),
		cacheRepaired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "cache_repairs_total",
			Help: "Cache entries found wrong by the guarded decrement and repaired from the database."}, []string{"sku"}),
	}
	o.holds = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "holds_total",
		Help: "Holds by what became of them: placed, confirmed, released, expired (by this replica's sweeper)."}, []string{"event"})
	o.leading = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: "sweeper_leader",
		Help: "1 while this replica holds the sweeper's leader lease, else 0."})
	o.sweepRefused = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "stockguard", Name: "sweeper_refusals_total",
		Help: "Sweeper writes the database refused because a newer leader had written (this replica led past its lease)."})
	for _, event := range []string{"placed", "confirmed", "released", "expired"} {
		o.holds.WithLabelValues(event) // exported at 0 from the start
	}
	reg.MustRegister(o.placed, o.refused, o.fenceRejected, o.cacheRepaired, o.holds, o.leading, o.sweepRefused)
	return o
}

func (o *observer) OrderPlaced()               { o.placed.Inc() }
func (o *observer) OrderRefused(reason string) { o.refused.WithLabelValues(reason).Inc() }
func (o *observer) FenceRejected(sku string)   { o.fenceRejected.WithLabelValues(sku).Inc() }
func (o *observer) CacheRepaired(sku string)   { o.cacheRepaired.WithLabelValues(sku).Inc() }
func (o *observer) HoldPlaced()                { o.holds.WithLabelValues("placed").Inc() }
func (o *observer) HoldConfirmed()             { o.holds.WithLabelValues("confirmed").Inc() }
func (o *observer) HoldReleased()              { o.holds.WithLabelValues("released").Inc() }
func (o *observer) HoldsExpired(n int)         { o.holds.WithLabelValues("expired").Add(float64(n)) }
func (o *observer) SweepRefused()              { o.sweepRefused.Inc() }
func (o *observer) SweeperLeading(leads bool) {
	if leads {
		o.leading.Set(1)
	} else {
		o.leading.Set(0)
	}
}

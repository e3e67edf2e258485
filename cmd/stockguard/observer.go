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
	reg.MustRegister(o.placed, o.refused, o.fenceRejected, o.cacheRepaired)
	return o
}

func (o *observer) OrderPlaced()               { o.placed.Inc() }
func (o *observer) OrderRefused(reason string) { o.refused.WithLabelValues(reason).Inc() }
func (o *observer) FenceRejected(sku string)   { o.fenceRejected.WithLabelValues(sku).Inc() }
func (o *observer) CacheRepaired(sku string)   { o.cacheRepaired.WithLabelValues(sku).Inc() }

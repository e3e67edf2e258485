package main

import (
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/service"
)

// refusalReasons are the values of orders_refused_total's reason label, every
// one internal/service counts a refusal under. They are exported at 0 from the start.
var refusalReasons = service.RefusalReasons

// holdEvents are the values of holds_total's event label.
var holdEvents = []string{"placed", "confirmed", "released", "expired"}

// observer counts the use case's events as Prometheus metrics. No label takes a
// value from a request: a SKU goes to the log, never into a label, so that the
// number of series stays bounded whatever the catalogue. Every series is
// exported from the start, so that an alert can tell "none yet" from "absent".
type observer struct {
	log           *slog.Logger
	placed        prometheus.Counter
	refused       *prometheus.CounterVec
	fenceRejected prometheus.Counter
	cacheRepaired prometheus.Counter
	holds         *prometheus.CounterVec
	leading       prometheus.Gauge
	sweepRefused  prometheus.Counter
	// The sweeper leader's audit; 0 on the other replicas (alert on the max).
	oversold, holdsOverdue prometheus.Gauge
}

var _ orders.Observer = (*observer)(nil)

func newObserver(reg prometheus.Registerer, log *slog.Logger) *observer {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "stockguard", Name: name, Help: help})
	}
	o := &observer{
		log:    log,
		placed: counter("orders_placed_total", "Orders placed."),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "orders_refused_total",
			Help: "Orders and holds refused, by reason."}, []string{"reason"}),
		fenceRejected: counter("fence_rejections_total",
			"Writes the database refused because a newer lock holder had written (a stale holder); the SKU is in the log line."),
		cacheRepaired: counter("cache_repairs_total",
			"Cache entries found wrong by the guarded decrement and repaired from the database; the SKU is in the log line."),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "holds_total",
			Help: "Holds by what became of them: placed, confirmed, released, expired (by this replica's sweeper)."}, []string{"event"}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: "sweeper_leader",
			Help: "1 while this replica holds the sweeper's leader lease, else 0."}),
		oversold: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: "audit_oversold_units",
			Help: "Units oversold (I1) at the sweeper leader's last audit (every 30s); 0 on the other replicas."}),
		holdsOverdue: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: "audit_holds_overdue",
			Help: "Holds still held past their expiry and grace (I6) at the sweeper leader's last audit; 0 on the other replicas."}),
		sweepRefused: counter("sweeper_refusals_total",
			"Sweeper writes the database refused because a newer leader had written (this replica led past its lease)."),
	}
	for _, r := range refusalReasons {
		o.refused.WithLabelValues(r)
	}
	for _, e := range holdEvents {
		o.holds.WithLabelValues(e)
	}
	reg.MustRegister(o.placed, o.refused, o.fenceRejected, o.cacheRepaired, o.holds, o.leading, o.sweepRefused, o.oversold, o.holdsOverdue,
		buildInfo())
	return o
}

// buildInfo is stockguard_build_info, always 1: its labels say which build runs
// (the module's version, the commit when Go recorded one, and the Go version).
func buildInfo() prometheus.Gauge {
	version, revision, goVersion := "unknown", "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = orUnknown(bi.Main.Version), orUnknown(bi.GoVersion)
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = orUnknown(s.Value)
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: "build_info",
		Help:        "Always 1; the labels say which build runs (revision unknown when built without VCS stamping).",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion}})
	g.Set(1)
	return g
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func (o *observer) OrderPlaced()               { o.placed.Inc() }
func (o *observer) OrderRefused(reason string) { o.refused.WithLabelValues(reason).Inc() }
func (o *observer) HoldPlaced()                { o.holds.WithLabelValues("placed").Inc() }
func (o *observer) HoldConfirmed()             { o.holds.WithLabelValues("confirmed").Inc() }
func (o *observer) HoldReleased()              { o.holds.WithLabelValues("released").Inc() }
func (o *observer) HoldsExpired(n int)         { o.holds.WithLabelValues("expired").Add(float64(n)) }
func (o *observer) SweepRefused()              { o.sweepRefused.Inc() }

// FenceRejected counts a stale holder's refused write; which SKU is for the log
// (a label per SKU would grow with the catalogue).
func (o *observer) FenceRejected(sku string) {
	o.fenceRejected.Inc()
	o.log.Warn("fence rejected a stale lock holder's write", "sku", sku)
}

// CacheRepaired counts a cache entry repaired from the database; which SKU is
// for the log.
func (o *observer) CacheRepaired(sku string) {
	o.cacheRepaired.Inc()
	o.log.Warn("cache entry was wrong and was repaired from the database", "sku", sku)
}

func (o *observer) SweeperLeading(leads bool) {
	if leads {
		o.leading.Set(1)
	} else {
		o.leading.Set(0)
		o.Audited(0, 0) // the next leader audits: no stale figure stays here
	}
}

func (o *observer) Audited(oversold, overdueHolds int64) {
	o.oversold.Set(float64(oversold))
	o.holdsOverdue.Set(float64(overdueHolds))
}

// eventDestinations are the values of the events' destination label, exported
// at 0 from the start. Webhooks add theirs (orders.DestinationWebhook) when
// they deliver.
var eventDestinations = []string{orders.DestinationNATS, orders.DestinationWebhook}

// eventObserver counts what operators watch of the stock events: who leads the
// relay, the outbox's backlog and the age of its oldest event (from the relay's
// leader; 0 on the other replicas, so alert on the max), deliveries, their
// failures and their lag by destination, purges, and the webhooks' attempts
// by result.
type eventObserver struct {
	webhookAttempts *prometheus.CounterVec
	leading         prometheus.Gauge
	backlog, oldest prometheus.Gauge
	published       *prometheus.CounterVec
	failures        *prometheus.CounterVec
	lag             *prometheus.HistogramVec
	purged          prometheus.Counter
}

var _ orders.EventObserver = (*eventObserver)(nil)

// deliveryLagBuckets span 1ms (a relay that keeps up) to 60s (the backlog
// alert's threshold).
var deliveryLagBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newEventObserver(reg prometheus.Registerer) *eventObserver {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "stockguard", Name: name, Help: help})
	}
	byDestination := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: name, Help: help}, []string{"destination"})
	}
	o := &eventObserver{
		leading: gauge("events_relay_leading", "1 while this replica holds the events relay's lease, else 0."),
		backlog: gauge("events_backlog",
			"Stock events written but not yet delivered to the stream (or, with no stream, not yet in the feed), as the relay's leader last read them (every second); 0 on the other replicas."),
		oldest: gauge("events_backlog_oldest_seconds",
			"Age of the oldest stock event not yet delivered, as the relay's leader last read it; 0 when none waits, and on the other replicas."),
		published: byDestination("events_published_total", "Stock events delivered (acknowledged), by destination."),
		failures:  byDestination("events_publish_failures_total", "Failed deliveries of stock events (a publish that returned an error), by destination."),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "stockguard", Name: "events_delivery_lag_seconds",
			Help: "Time from a stock event's commit (the database's clock) to its delivery's acknowledgement, by destination.", Buckets: deliveryLagBuckets},
			[]string{"destination"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "stockguard", Name: "events_purged_total",
			Help: "Delivered stock events purged after the event retention."}),
		webhookAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "webhook_attempts_total",
			Help: "Webhook delivery attempts by result: delivered, retry (failed, to be tried again), failed (given up: recorded and skipped)."}, []string{"result"}),
	}
	for _, r := range orders.WebhookResults {
		o.webhookAttempts.WithLabelValues(r)
	}
	for _, d := range eventDestinations {
		o.published.WithLabelValues(d)
		o.failures.WithLabelValues(d)
		o.lag.WithLabelValues(d)
	}
	reg.MustRegister(o.leading, o.backlog, o.oldest, o.published, o.failures, o.lag, o.purged, o.webhookAttempts)
	return o
}

// RelayLeading sets the leading gauge; a replica that stops leading zeroes its
// backlog figures, so that only the leader's count.
func (o *eventObserver) RelayLeading(leads bool) {
	if leads {
		o.leading.Set(1)
		return
	}
	o.leading.Set(0)
	o.EventBacklog(orders.Backlog{}, 0)
}

func (o *eventObserver) EventBacklog(b orders.Backlog, age time.Duration) {
	o.backlog.Set(float64(b.Events))
	o.oldest.Set(age.Seconds())
}

func (o *eventObserver) EventsPublished(destination string, n int, lags []time.Duration) {
	o.published.WithLabelValues(destination).Add(float64(n))
	h := o.lag.WithLabelValues(destination)
	for _, l := range lags {
		h.Observe(max(l, 0).Seconds())
	}
}

func (o *eventObserver) EventPublishFailed(destination string) {
	o.failures.WithLabelValues(destination).Inc()
}

func (o *eventObserver) EventsPurged(n int) { o.purged.Add(float64(n)) }

// WebhookAttempt counts a webhook delivery attempt by its result.
func (o *eventObserver) WebhookAttempt(result string) {
	o.webhookAttempts.WithLabelValues(result).Inc()
}

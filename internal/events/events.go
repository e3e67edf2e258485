// Package events is stockguard's stock events after their commit: the relay
// (relay.go) that places them in the feed and publishes them to the stream,
// once per cluster; the webhooks (webhooks.go), their administration and
// their delivery while the relay leads; and the feed (feed.go) that clients
// page through. The events themselves are written by the order use case
// (package service), each in the transaction of its change, into the outbox
// this package reads (orders.EventStore).
//
// It imports the domain (package orders), the once-per-cluster loop (package
// lease) and the webhook sender's errors (package webhook), and no database,
// cache, lock, stream or HTTP package: cmd/stockguard wires the adapters.
package events

import (
	"context"
	"log/slog"
	"time"

	"github.com/stockguard/stockguard/internal/lease"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/webhook"
)

// Defaults of Config.
const (
	// DefaultRelay: an idle relay reads the outbox ten times a second, so an
	// event is delivered within about that of its commit.
	DefaultRelay          = 100 * time.Millisecond
	DefaultEventRetention = 24 * time.Hour
)

// Config tunes a Service.
type Config struct {
	// RelayInterval is how often the relay looks for new events when it found
	// none, and EventRetention how long a delivered event stays in the feed.
	RelayInterval, EventRetention time.Duration
	// PurgeInterval is how often the relay's leader purges the events past
	// the retention (a 24th of it, between a second and ten minutes, when
	// zero).
	PurgeInterval time.Duration
	// WebhookRefresh is how often the relay reads the webhook endpoints, to
	// serve one added and stop serving one deleted.
	WebhookRefresh time.Duration
	// WebhookDisableAfter disables an endpoint whose attempts have all failed
	// for this long, with no success (DefaultWebhookDisableAfter when zero).
	WebhookDisableAfter time.Duration
}

// Deps are what a Service runs on.
type Deps struct {
	// Events is the outbox the relay reads and the feed (no relay and no feed
	// without it), Stream where the relay publishes (none: events go to the
	// feed only), Observer its metrics.
	Events   orders.EventStore
	Stream   orders.Stream
	Observer orders.EventObserver
	// Leader is the lock of the relay's leader lease: one that issues
	// fencing tokens. Fences counts a token of it the database refused and
	// the relay advanced (nil: not counted).
	Leader orders.Locker
	Fences FenceObserver
	// Webhooks are the endpoints (no webhook admin without them), Sender what
	// delivers to them (none: the relay delivers to none), Retry when a
	// failed attempt is tried again (nil: never).
	Webhooks orders.WebhookStore
	Sender   WebhookSender
	Retry    RetryPolicy
	// Guard judges an endpoint's URL at registration (nil: one that refuses
	// every loopback, private and other special-purpose address). The sender
	// must dial through the same guard: registration alone cannot see where
	// a name will resolve later.
	Guard WebhookGuard
}

// FenceObserver counts the relay's token refused by the database while the
// relay still held its lease, and advanced (orders.Observer is one).
type FenceObserver interface {
	FenceRejected(lease string)
}

// Service is the stock events' use case: the relay, the webhooks and the feed.
type Service struct {
	cfg      Config
	events   orders.EventStore
	stream   orders.Stream
	eobs     orders.EventObserver
	leader   orders.Locker
	fences   FenceObserver
	webhooks orders.WebhookStore
	switches orders.WebhookSwitch // nil when the store cannot disable endpoints
	sender   WebhookSender
	retry    RetryPolicy
	guard    WebhookGuard
	// wait sleeps d or until ctx ends (false then): the webhooks' waits, which
	// tests may shorten.
	wait func(ctx context.Context, d time.Duration) bool
	log  *slog.Logger
	now  func() time.Time
}

// New returns the events' use case on its dependencies. now is the clock
// (time.Now outside tests).
func New(cfg Config, d Deps, log *slog.Logger, now func() time.Time) *Service {
	s := &Service{cfg: withDefaults(cfg), events: d.Events, stream: d.Stream, eobs: d.Observer, leader: d.Leader, fences: d.Fences,
		webhooks: d.Webhooks, sender: d.Sender, retry: d.Retry, guard: d.Guard, wait: lease.Sleep, log: log, now: now}
	s.switches, _ = d.Webhooks.(orders.WebhookSwitch)
	if s.guard == nil {
		s.guard = webhook.NewGuard()
	}
	if s.eobs == nil {
		s.eobs = nopEvents{}
	}
	if s.fences == nil {
		s.fences = nopFences{}
	}
	return s
}

func withDefaults(cfg Config) Config {
	if cfg.RelayInterval <= 0 {
		cfg.RelayInterval = DefaultRelay
	}
	if cfg.EventRetention <= 0 {
		cfg.EventRetention = DefaultEventRetention
	}
	if cfg.PurgeInterval <= 0 {
		// Often enough that the outbox holds little more than the retention's worth.
		cfg.PurgeInterval = min(max(cfg.EventRetention/24, time.Second), 10*time.Minute)
	}
	if cfg.WebhookRefresh <= 0 {
		cfg.WebhookRefresh = DefaultWebhookRefresh
	}
	if cfg.WebhookDisableAfter <= 0 {
		cfg.WebhookDisableAfter = DefaultWebhookDisableAfter
	}
	return cfg
}

// fenced runs one of the relay's writes with its lease's token, a token the
// database refuses advanced past the one it had (lease.Fenced).
func (s *Service) fenced(ctx context.Context, g orders.Grant, write func(orders.Fences) error) error {
	return lease.Fenced(ctx, g, s.log, s.fences.FenceRejected, write)
}

// nopEvents is the EventObserver of a service given none.
type nopEvents struct{}

func (nopEvents) RelayLeading(bool)                            {}
func (nopEvents) EventBacklog(orders.Backlog, time.Duration)   {}
func (nopEvents) EventsPublished(string, int, []time.Duration) {}
func (nopEvents) EventPublishFailed(string)                    {}
func (nopEvents) EventsPurged(int)                             {}
func (nopEvents) WebhookAttempt(string)                        {}

// nopFences is the FenceObserver of a service given none.
type nopFences struct{}

func (nopFences) FenceRejected(string) {}

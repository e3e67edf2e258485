// Package httpapi is stockguard's HTTP layer, on gin: the JSON API of the design,
// problem+json errors (RFC 9457), the admin token, health, readiness and metrics.
// Every route is in routes.go; every error's status is in problem.go.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/orders"
)

// UseCases are what the handlers call, one small interface per use case,
// each declared beside its handlers: Orders, Stock and Auditor here, Holds
// in holds.go, Locations in locations.go, Feed and Republisher in
// events.go, Webhooks in webhooks.go. cmd/stockguard gives
// *service.Service for the first five and *events.Service for the others.
// A nil Feed, Webhooks or Republisher answers its routes 404: the stock
// events are turned off.
type UseCases struct {
	Orders      Orders
	Holds       Holds
	Stock       Stock
	Audit       Auditor
	Locations   Locations
	Feed        Feed
	Webhooks    Webhooks
	Republisher Republisher
}

// Orders is the orders' use case: place, read, list and cancel them.
type Orders interface {
	Place(ctx context.Context, req orders.PlaceRequest) (orders.Placed, error)
	Order(ctx context.Context, id string) (orders.Order, error)
	Orders(ctx context.Context, after string, limit int) ([]orders.Order, bool, error)
	Cancel(ctx context.Context, id string) (orders.Order, error)
}

// Stock is the catalogue's use case: read, list, restock and set the SKUs'
// stock.
type Stock interface {
	Stock(ctx context.Context, sku string) (orders.Stock, error)
	SKUs(ctx context.Context, after string, limit int) ([]orders.Stock, bool, error)
	RestockOnce(ctx context.Context, sku string, quantity int64, key string) (orders.Stocked, error)
	SetStock(ctx context.Context, sku string, set orders.StockSet) (orders.Stock, bool, error)
	// The same for one location, and transfers between locations.
	SetLocationStock(ctx context.Context, sku, location string, set orders.StockSet) (orders.Stock, bool, error)
	RestockLocation(ctx context.Context, sku, location string, quantity int64, key string) (orders.Stocked, error)
	Transfer(ctx context.Context, sku string, t orders.Transfer, key string) (orders.Stocked, error)
}

// Auditor checks the invariants on demand (GET /v1/audit).
type Auditor interface {
	Audit(ctx context.Context, deep bool) (orders.Audit, error)
}

// Config tunes the HTTP layer.
type Config struct {
	// Auth turns each request's bearer secret into its caller. Nil: only
	// AdminToken is accepted (a caller with admin), and nothing when it is
	// empty too.
	Auth       Authenticator
	AdminToken string
	// Clients is the clients' admin API (nil: its routes answer 404).
	Clients Clients
	// Limiter applies the rate limits (nil: none).
	Limiter Limiter
	// NoAuth takes every request as the admin's, unchecked and unlimited:
	// the control group of the benchmark that measures what the checks cost,
	// never a deployment.
	NoAuth bool
	// TrustedProxies are the addresses (CIDRs) whose X-Forwarded-For is
	// believed for a request's source address; none: the peer's own.
	TrustedProxies []string
	// MaxBody bounds a request body; larger ones get 413. Default 16 KiB.
	MaxBody int64
	// RequestTimeout is every request's deadline. Default 10s.
	RequestTimeout time.Duration
	// RetryAfter is what a 503 tells clients to wait. Default 1s.
	RetryAfter time.Duration
	// AccessLog writes a line per request at info; off, only failures (5xx)
	// are logged, at warn (for load runs).
	AccessLog bool
}

// Dependency is one service a replica needs, as readiness checks it.
type Dependency struct {
	// Name is orders.DependencyDatabase, DependencyRedis or DependencyLockService.
	Name string
	// Check answers nil when the dependency answers within ctx.
	Check func(ctx context.Context) error
}

type server struct {
	cfg     Config
	orders  Orders
	holds   Holds
	stock   Stock
	auditor Auditor
	auth    Authenticator
	clients Clients
	limiter Limiter
	scopes  map[string][]orders.Scope // by "METHOD /path": what routes records
	deps    []Dependency
	metrics http.Handler
	log     *slog.Logger

	// The stock events' use cases.
	feed        Feed
	webhooks    Webhooks
	republisher Republisher

	locations Locations // the locations' use case (locations.go)

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the HTTP handler on the use cases uc. deps are what readiness
// checks; metrics serves /metrics, or nil when another listener serves it
// (/metrics is then no route here: 404 no-route); reg receives the HTTP
// metrics.
func New(cfg Config, uc UseCases, deps []Dependency, metrics http.Handler, reg prometheus.Registerer, log *slog.Logger) http.Handler {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 16 << 10
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.Auth == nil && cfg.AdminToken != "" {
		cfg.Auth = adminOnly(cfg.AdminToken)
	}
	if uc.Feed == nil {
		uc.Feed = eventsOff{}
	}
	if uc.Webhooks == nil {
		uc.Webhooks = eventsOff{}
	}
	if uc.Republisher == nil {
		uc.Republisher = eventsOff{}
	}
	s := &server{cfg: cfg, orders: uc.Orders, holds: uc.Holds, stock: uc.Stock, auditor: uc.Audit, locations: uc.Locations, feed: uc.Feed, webhooks: uc.Webhooks, republisher: uc.Republisher, deps: deps, metrics: metrics, log: log, auth: cfg.Auth, clients: cfg.Clients, limiter: cfg.Limiter,
		scopes: map[string][]orders.Scope{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "http_requests_total",
			Help: "HTTP requests by route, method and status."}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "stockguard", Name: "http_request_duration_seconds",
			Help: "HTTP request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"route"}),
	}
	reg.MustRegister(s.requests, s.duration)
	// Readiness per dependency, for an alert on a replica that is up but cannot
	// reach its database, Redis or lock service.
	for _, d := range deps {
		reg.MustRegister(newDependencyGauge(d))
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true // c.Request.Context() is what handlers pass on
	// X-Forwarded-For from the trusted proxies only (gin trusts every peer
	// unless told): the failed-authentication limit counts by source address.
	if err := r.SetTrustedProxies(cfg.TrustedProxies); err != nil {
		log.Error("--trusted-proxies refused: no proxy is trusted", "err", err)
		_ = r.SetTrustedProxies(nil)
	}
	// The request's context first (its id and deadline), so that every line
	// and answer carries the id; observe next, outside recover: it sees the 500
	// of a panic.
	r.Use(s.requestContext, s.observe, s.recover)
	s.routes(r)
	return r
}

// recover turns a panic into a 500 problem; the panic is logged, not shown.
func (s *server) recover(c *gin.Context) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler { //nolint:errorlint // a sentinel passed to panic, compared as net/http does
				panic(v) // net/http's own way to abort a response: let it do so
			}
			s.log.ErrorContext(c.Request.Context(), "panic in handler", "panic", v, "path", c.Request.URL.Path)
			s.problem(c, errPanic)
		}
	}()
	c.Next()
}

func (s *server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	status := c.Writer.Status()
	took := time.Since(start)
	if rc, ok := c.Request.Context().(*reqContext); ok && rc.metrics != nil {
		rc.metrics.observe(status, took.Seconds()) // the route's, looked up once
	} else {
		s.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(status)).Inc()
		s.duration.WithLabelValues(route).Observe(took.Seconds())
	}
	level := slog.LevelInfo
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		level = slog.LevelWarn
	case !s.cfg.AccessLog:
		return
	}
	if !s.log.Enabled(c.Request.Context(), level) {
		return // no line: no attributes built either
	}
	attrs := []slog.Attr{slog.String("method", c.Request.Method), slog.String("route", route),
		slog.Int("status", status), slog.Duration("latency", took)}
	if key := c.GetHeader("Idempotency-Key"); key != "" {
		attrs = append(attrs, slog.String("idempotency_key", key))
	}
	s.log.LogAttrs(c.Request.Context(), level, "request", attrs...)
}

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

// Orders is the use case the handlers call (implemented by *service.Service;
// cmd/stockguard asserts it).
type Orders interface {
	Place(ctx context.Context, req orders.PlaceRequest) (orders.Placed, error)
	Order(ctx context.Context, id string) (orders.Order, error)
	Cancel(ctx context.Context, id string) (orders.Order, error)
	Stock(ctx context.Context, sku string) (orders.Stock, error)
	Restock(ctx context.Context, sku string, quantity int64) (orders.Stock, error)
	Audit(ctx context.Context, deep bool) (orders.Audit, error)
	Hold(ctx context.Context, req orders.HoldRequest) (orders.Held, error)
	Reservation(ctx context.Context, id string) (orders.Reservation, error)
	Extend(ctx context.Context, req orders.HoldAction) (orders.Held, error)
	Confirm(ctx context.Context, req orders.ConfirmRequest) (orders.Placed, error)
	Release(ctx context.Context, req orders.HoldAction) (orders.Held, error)
}

// Config tunes the HTTP layer.
type Config struct {
	// AdminToken guards restock and audit (Authorization: Bearer <token>). Empty
	// turns the admin API off: every admin call is refused.
	AdminToken string
	// MaxBody bounds a request body; larger ones get 413. Default 16 KiB.
	MaxBody int64
	// RequestTimeout is every request's deadline. Default 10s.
	RequestTimeout time.Duration
	// RetryAfter is what a 503 tells clients to wait. Default 1s.
	RetryAfter time.Duration
}

type server struct {
	cfg     Config
	orders  Orders
	ready   func(ctx context.Context) error
	metrics http.Handler
	log     *slog.Logger

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the HTTP handler. ready reports whether Redis and the database
// answer; metrics serves /metrics; reg receives the HTTP metrics.
func New(cfg Config, svc Orders, ready func(ctx context.Context) error, metrics http.Handler, reg prometheus.Registerer, log *slog.Logger) http.Handler {
	if cfg.MaxBody == 0 {
		cfg.MaxBody = 16 << 10
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	s := &server{cfg: cfg, orders: svc, ready: ready, metrics: metrics, log: log,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "stockguard", Name: "http_requests_total",
			Help: "HTTP requests by route, method and status."}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "stockguard", Name: "http_request_duration_seconds",
			Help: "HTTP request latency by route.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"route"}),
	}
	reg.MustRegister(s.requests, s.duration)

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true                          // c.Request.Context() is what handlers pass on
	r.Use(s.tagRequest, s.observe, s.recover, s.deadline) // observe outside recover: it sees the 500 of a panic
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

// deadline gives every request a deadline.
func (s *server) deadline(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.RequestTimeout)
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
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
	s.requests.WithLabelValues(route, c.Request.Method, strconv.Itoa(status)).Inc()
	s.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	level := slog.LevelDebug
	if status >= 500 {
		level = slog.LevelWarn
	}
	s.log.Log(c.Request.Context(), level, "request", "method", c.Request.Method, "path", c.Request.URL.Path,
		"status", status, "duration", time.Since(start))
}

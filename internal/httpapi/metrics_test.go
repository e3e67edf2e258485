package httpapi

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// A nil metrics handler means another listener serves /metrics
// (--metrics-addr): here it is no route, answered as any path that is none.
func TestNoMetricsHandlerNoMetricsRoute(t *testing.T) {
	h := New(Config{}, UseCases{}, nil, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	for _, r := range h.(*gin.Engine).Routes() {
		if r.Path == "/metrics" {
			t.Fatalf("%s /metrics is a route without a metrics handler", r.Method)
		}
	}
	w := get(t, h, "/metrics", nil, false)
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusNotFound || p.Type != ProblemBase+"no-route" {
		t.Fatalf("GET /metrics: %d %s (%v), want 404 no-route", w.Code, w.Body.String(), err)
	}
}

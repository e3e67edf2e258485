package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stockguard/stockguard/internal/orders"
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

// placeOnly answers every order placed, and nothing else.
type placeOnly struct{ useCase }

func (placeOnly) Place(_ context.Context, req orders.PlaceRequest) (orders.Placed, error) {
	return orders.Placed{Order: orders.Order{ID: "o1", Status: orders.StatusPlaced, Items: req.Items}}, nil
}

// The HTTP metrics name each answer by route, method and status, whether the
// route's own observers count it (a route's) or the vectors do (the others):
// the series of the answers given, and no other.
func TestHTTPMetricsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := New(Config{AdminToken: "tok"}, UseCases{Orders: placeOnly{}}, nil, nil, reg, slog.New(slog.DiscardHandler))
	send := func(method, path, token string) {
		req := httptest.NewRequestWithContext(context.Background(), method, path, strings.NewReader(`{"items":[{"sku":"A","quantity":1}]}`))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for range 3 {
		send(http.MethodPost, "/v1/orders", "tok")
	}
	send(http.MethodPost, "/v1/orders", "")
	send(http.MethodPost, "/v1/orders", "wrong")
	send(http.MethodGet, "/healthz", "")
	send(http.MethodGet, "/nowhere", "")
	send(http.MethodDelete, "/v1/orders", "tok")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := f.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				got[key] = uint64(m.GetCounter().GetValue())
			case m.GetHistogram() != nil:
				got[key] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]uint64{
		"stockguard_http_requests_total{method=POST,route=/v1/orders,status=201}":  3,
		"stockguard_http_requests_total{method=POST,route=/v1/orders,status=401}":  2,
		"stockguard_http_requests_total{method=GET,route=/healthz,status=200}":     1,
		"stockguard_http_requests_total{method=GET,route=unmatched,status=404}":    1,
		"stockguard_http_requests_total{method=DELETE,route=unmatched,status=405}": 1,
		"stockguard_http_request_duration_seconds{route=/v1/orders}":               5,
		"stockguard_http_request_duration_seconds{route=/healthz}":                 1,
		"stockguard_http_request_duration_seconds{route=unmatched}":                2,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("series:\n got %v\nwant %v", got, want)
	}
}

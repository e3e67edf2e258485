package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
)

// placer answers every order at once, so that a benchmark measures the HTTP
// layer alone.
type placer struct{ ordersAPI }

type ordersAPI = httpapi.Orders

func (placer) Place(_ context.Context, req orders.PlaceRequest) (orders.Placed, error) {
	return orders.Placed{Order: orders.Order{ID: "01JB3ZQ5R8X9KQF6T2W4Y7M1NC", Status: orders.StatusPlaced, Items: req.Items,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)}}, nil
}

// benchToken is the admin token the benchmark's replica takes, as the load
// generator of make bench sends its orders with one (-admin-token).
const benchToken = "bench-admin-token"

// BenchmarkPlaceOrder is the HTTP layer's cost of one order as the load
// generator sends it: middleware, authentication, decoding, metrics and the
// 201. BENCHMARKS.md ("Allocations per order") keeps its count.
func BenchmarkPlaceOrder(b *testing.B) {
	h := benchHandler()
	b.ReportAllocs()
	for b.Loop() {
		placeOrder(b, h)
	}
}

// benchHandler is the HTTP layer on placer, with the admin token.
func benchHandler() http.Handler {
	reg := prometheus.NewRegistry()
	return httpapi.New(httpapi.Config{AdminToken: benchToken}, httpapi.UseCases{Orders: placer{}}, nil, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// placeOrder sends h one order as the load generator does, and wants a 201.
func placeOrder(tb testing.TB, h http.Handler) {
	const body = `{"items":[{"sku":"SKU-00001","quantity":1}]}`
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/orders", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-0123456789abcdef")
	req.Header.Set("Authorization", "Bearer "+benchToken)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusCreated {
		tb.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

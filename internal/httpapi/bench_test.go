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

// BenchmarkPlaceOrder is the HTTP layer's cost of one order as the load
// generator sends it: middleware, decoding, metrics and the 201.
func BenchmarkPlaceOrder(b *testing.B) {
	reg := prometheus.NewRegistry()
	h := httpapi.New(httpapi.Config{}, httpapi.UseCases{Orders: placer{}}, nil, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	const body = `{"items":[{"sku":"SKU-00001","quantity":1}]}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-0123456789abcdef")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

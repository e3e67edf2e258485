package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/mock"

	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
)

// problemOf decodes a problem answer, failing the test on another kind.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, w.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSetStockAnswers(t *testing.T) {
	m := mocks.NewStock(t)
	h := newHandler(t, httpapi.UseCases{Stock: m})
	admin := map[string]string{"Authorization": "Bearer " + token}
	st := orders.Stock{SKU: "S-1", Available: 7, Stocked: 7}
	m.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 7}).Return(st, true, nil).Once()
	w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":7}`, header: admin})
	if w.Code != http.StatusCreated || w.Header().Get("Location") != "/v1/skus/S-1" {
		t.Errorf("new SKU: %d, Location %q, want 201 and /v1/skus/S-1", w.Code, w.Header().Get("Location"))
	}
	m.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: 0}).Return(orders.Stock{SKU: "S-1", Stocked: 7, Sold: 7}, false, nil).Once()
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":0}`, header: admin}); w.Code != http.StatusOK {
		t.Errorf("existing SKU: %d, want 200", w.Code)
	}
	// Missing, negative or fractional: the use case is asked with -1, which it
	// refuses by name (its own test); here, that the handler does not guess.
	for _, body := range []string{`{}`, `{"available":-3}`, `{"available":1.5}`} {
		m.EXPECT().SetStock(mock.Anything, "S-1", orders.StockSet{Available: -1}).Return(orders.Stock{}, false,
			&orders.ValidationError{Fields: []orders.FieldError{{Field: "available", Message: "must be between 0 and 1000000000"}}}).Once()
		if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: body, header: admin, offContract: true}); w.Code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d, want 422", body, w.Code)
		}
	}
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":"7"}`, header: admin, offContract: true}); w.Code != http.StatusBadRequest {
		t.Errorf("a string: %d, want 400", w.Code)
	}
	if w := do(h, call{method: "PUT", path: "/v1/skus/S-1", body: `{"available":7}`, header: noAuth, offContract: true}); w.Code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", w.Code)
	}
	m.EXPECT().RestockOnce(mock.Anything, "N-1", int64(2), "").Return(orders.Stocked{Stock: orders.Stock{SKU: "N-1", Available: 2, Stocked: 2}, Created: true}, nil).Once()
	if w := do(h, call{method: "POST", path: "/v1/skus/N-1/restock", body: `{"quantity":2}`, header: admin}); w.Code != http.StatusCreated ||
		w.Header().Get("Location") != "/v1/skus/N-1" {
		t.Errorf("restock of a new SKU: %d, Location %q, want 201", w.Code, w.Header().Get("Location"))
	}
}

func TestListAnswers(t *testing.T) {
	m, holds, stock, feed := mocks.NewOrders(t), mocks.NewHolds(t), mocks.NewStock(t), mocks.NewFeed(t)
	h := newHandler(t, httpapi.UseCases{Orders: m, Holds: holds, Stock: stock, Feed: feed})
	stock.EXPECT().SKUs(mock.Anything, "B", 2).Return([]orders.Stock{{SKU: "C"}, {SKU: "D"}}, true, nil).Once()
	w := do(h, call{method: "GET", path: "/v1/skus?limit=2&starting_after=B"})
	var l struct {
		Object  string         `json:"object"`
		URL     string         `json:"url"`
		Data    []orders.Stock `json:"data"`
		HasMore bool           `json:"has_more"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &l); err != nil || w.Code != 200 || l.Object != "list" || l.URL != "/v1/skus" || !l.HasMore || len(l.Data) != 2 {
		t.Errorf("SKUs page: %d %s (%v)", w.Code, w.Body, err)
	}
	stock.EXPECT().SKUs(mock.Anything, "", 20).Return(nil, false, nil).Once()
	if w := do(h, call{method: "GET", path: "/v1/skus"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"data":[]`) {
		t.Errorf("empty SKUs page: %d %s, want 200 and data []", w.Code, w.Body)
	}
	// Not an integer: refused saying so, before the use case (which would say "between 1 and 100").
	if w := do(h, call{method: "GET", path: "/v1/skus?limit=many", offContract: true}); w.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(w.Body.String(), `must be an integer, not \"many\"`) {
		t.Errorf("limit=many: %d %s, want 422 saying it must be an integer", w.Code, w.Body)
	}
	if w := do(h, call{method: "GET", path: "/v1/orders", header: noAuth, offContract: true}); w.Code != http.StatusUnauthorized {
		t.Errorf("orders without the admin token: %d, want 401", w.Code)
	}
	m.EXPECT().Orders(mock.Anything, "", 20).Return([]orders.Order{{ID: "o2", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A", Quantity: 1}}}}, false, nil).Once()
	w = do(h, call{method: "GET", path: "/v1/orders", header: map[string]string{"Authorization": "Bearer " + token}})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"o2"`) || !strings.Contains(w.Body.String(), `"url":"/v1/orders"`) {
		t.Errorf("orders page: %d %s", w.Code, w.Body)
	}
	// Holds are listed like orders: admin only, newest first, the same cursor.
	if w := do(h, call{method: "GET", path: "/v1/reservations", header: noAuth, offContract: true}); w.Code != http.StatusUnauthorized {
		t.Errorf("holds without the admin token: %d, want 401", w.Code)
	}
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	holds.EXPECT().Reservations(mock.Anything, "h9", 2).Return([]orders.Reservation{{ID: "h8", Status: orders.HoldHeld,
		Items: []orders.Item{{SKU: "A", Quantity: 1}}, CreatedAt: at, ExpiresAt: at.Add(time.Minute)}}, true, nil).Once()
	w = do(h, call{method: "GET", path: "/v1/reservations?limit=2&starting_after=h9", header: map[string]string{"Authorization": "Bearer " + token}})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"h8"`) || !strings.Contains(w.Body.String(), `"url":"/v1/reservations"`) ||
		!strings.Contains(w.Body.String(), `"has_more":true`) {
		t.Errorf("holds page: %d %s", w.Code, w.Body)
	}
	// The event feed: admin only, the same cursor and list shape, oldest first
	// as the use case reads it.
	if w := do(h, call{method: "GET", path: "/v1/events", header: noAuth, offContract: true}); w.Code != http.StatusUnauthorized {
		t.Errorf("events without the admin token: %d, want 401", w.Code)
	}
	feed.EXPECT().Events(mock.Anything, "evt_7", 2).Return([]orders.Event{{ID: "evt_8", Position: 8, Type: orders.EventStockRestocked,
		SKU: "A", Seq: 1, Quantity: 5, Change: orders.Levels{Available: 5, Stocked: 5}, Counters: orders.Levels{Available: 5, Stocked: 5},
		CreatedAt: at}}, false, nil).Once()
	w = do(h, call{method: "GET", path: "/v1/events?limit=2&starting_after=evt_7", header: map[string]string{"Authorization": "Bearer " + token}})
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"id":"evt_8"`) || !strings.Contains(w.Body.String(), `"url":"/v1/events"`) ||
		strings.Contains(w.Body.String(), `"order_id"`) {
		t.Errorf("events page: %d %s", w.Code, w.Body)
	}
	if w := do(h, call{method: "GET", path: "/v1/events?starting_after=", header: map[string]string{"Authorization": "Bearer " + token}, offContract: true}); w.Code != http.StatusUnprocessableEntity ||
		!strings.Contains(w.Body.String(), "must not be empty") {
		t.Errorf("an empty starting_after: %d %s, want 422 saying it must not be empty", w.Code, w.Body)
	}
}

// The true reason: an unknown SKU is 422 naming it; a dependency down is 503
// naming which, with Retry-After; busy is busy; a replayed refusal says so.
func TestTrueReasons(t *testing.T) {
	m := mocks.NewOrders(t)
	h := newHandler(t, httpapi.UseCases{Orders: m})
	body := `{"items":[{"sku":"NOPE-9","quantity":1}]}`
	m.EXPECT().Place(mock.Anything, mock.Anything).Return(orders.Placed{}, &orders.UnknownSKUError{SKUs: []string{"NOPE-9"}}).Once()
	w := do(h, call{method: "POST", path: "/v1/orders", body: body})
	p := problemOf(t, w)
	if w.Code != http.StatusUnprocessableEntity || p["type"] != httpapi.ProblemBase+"unknown-sku" || !slices.Equal(toStrings(p["skus"]), []string{"NOPE-9"}) {
		t.Errorf("unknown SKU: %d %v", w.Code, p)
	}

	for _, dep := range []string{orders.DependencyRedis, orders.DependencyDatabase, orders.DependencyLockService} {
		m.EXPECT().Place(mock.Anything, mock.Anything).Return(orders.Placed{}, fmt.Errorf("place: %w", orders.Unavailable(dep, errors.New("dial tcp 10.0.0.1:6379: connection refused")))).Once()
		w = do(h, call{method: "POST", path: "/v1/orders", body: body})
		p = problemOf(t, w)
		if w.Code != http.StatusServiceUnavailable || p["type"] != httpapi.ProblemBase+"dependency-unavailable" || p["dependency"] != dep ||
			w.Header().Get("Retry-After") == "" || strings.Contains(w.Body.String(), "10.0.0.1") {
			t.Errorf("%s down: %d %v, Retry-After %q (want 503 dependency-unavailable naming it, no address)", dep, w.Code, p, w.Header().Get("Retry-After"))
		}
	}

	m.EXPECT().Place(mock.Anything, mock.Anything).Return(orders.Placed{},
		&orders.ReplayedError{Err: &orders.InsufficientStockError{SKUs: []string{"A-1"}}}).Once()
	w = do(h, call{method: "POST", path: "/v1/orders", body: body, header: map[string]string{"Idempotency-Key": "k-9"}})
	if w.Code != http.StatusConflict || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("replayed 409: %d, Idempotent-Replayed %q", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
	m.EXPECT().Place(mock.Anything, mock.Anything).Return(orders.Placed{}, &orders.InsufficientStockError{SKUs: []string{"A-1"}}).Once()
	if w := do(h, call{method: "POST", path: "/v1/orders", body: body}); w.Code != http.StatusConflict || w.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("first 409: %d, Idempotent-Replayed %q, want none", w.Code, w.Header().Get("Idempotent-Replayed"))
	}
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// X-Request-Id: the client's, when it is one, or a new one; on the answer and
// in the problem body.
func TestRequestID(t *testing.T) {
	m := mocks.NewOrders(t)
	h := newHandler(t, httpapi.UseCases{Orders: m})
	w := do(h, call{method: "GET", path: "/nowhere", header: map[string]string{"X-Request-Id": "req-42"}, offContract: true})
	if got := w.Header().Get("X-Request-Id"); got != "req-42" || problemOf(t, w)["request_id"] != "req-42" {
		t.Errorf("client's id: header %q, body %s", got, w.Body)
	}
	for _, bad := range []string{"", strings.Repeat("x", 129), "two words"} {
		w := do(h, call{method: "GET", path: "/nowhere", header: map[string]string{"X-Request-Id": bad}, offContract: true})
		got := w.Header().Get("X-Request-Id")
		if got == "" || got == bad || problemOf(t, w)["request_id"] != got {
			t.Errorf("client's id %q: answered %q, body %s", bad, got, w.Body)
		}
	}
	a := do(h, call{method: "GET", path: "/healthz"}).Header().Get("X-Request-Id")
	b := do(h, call{method: "GET", path: "/healthz"}).Header().Get("X-Request-Id")
	if a == "" || a == b {
		t.Errorf("made ids %q and %q: want two different ones", a, b)
	}
}

// /readyz names every dependency and its state.
func TestReadyzPerDependency(t *testing.T) {
	reg := prometheus.NewRegistry()
	var redisErr error
	deps := []httpapi.Dependency{
		{Name: orders.DependencyDatabase, Check: func(context.Context) error { return nil }},
		{Name: orders.DependencyRedis, Check: func(context.Context) error { return redisErr }},
	}
	h := httpapi.New(httpapi.Config{}, httpapi.UseCases{Orders: mocks.NewOrders(t)}, deps, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	type state struct{ Name, State, Error string }
	var got struct {
		Status       string  `json:"status"`
		Dependencies []state `json:"dependencies"`
	}
	w := do(h, call{method: "GET", path: "/readyz"})
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || got.Status != "ready" ||
		!slices.Equal(got.Dependencies, []state{{"database", "up", ""}, {"redis", "up", ""}}) {
		t.Errorf("all up: %d %s", w.Code, w.Body)
	}
	redisErr = errors.New("dial tcp 127.0.0.1:1: connection refused")
	w = do(h, call{method: "GET", path: "/readyz"})
	got.Dependencies = nil
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 503 || got.Status != "not ready" || w.Header().Get("Retry-After") == "" ||
		!slices.Equal(got.Dependencies, []state{{"database", "up", ""}, {"redis", "down", redisErr.Error()}}) {
		t.Errorf("redis down: %d %s", w.Code, w.Body)
	}
}

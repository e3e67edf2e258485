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

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/httpapi/mocks"
	"github.com/stockguard/stockguard/internal/orders"
)

const token = "s3cret"

// noAuth is a call's header without a credential.
var noAuth = map[string]string{"Authorization": ""}

func newHandler(t *testing.T, uc httpapi.UseCases) http.Handler {
	t.Helper()
	reg := prometheus.NewRegistry()
	// Every request and answer is checked against api/openapi.yaml.
	return apitest.Handler(t, httpapi.New(httpapi.Config{AdminToken: token}, uc, nil,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, slog.New(slog.NewTextHandler(io.Discard, nil))))
}

type call struct {
	method, path, body, contentType string
	header                          map[string]string
	// offContract: the request breaks api/openapi.yaml on purpose, and only its
	// answer is checked against it.
	offContract bool
}

func do(h http.Handler, c call) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(context.Background(), c.method, c.path, strings.NewReader(c.body))
	if c.contentType == "" && c.body != "" {
		c.contentType = "application/json"
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	// Every call is the admin's unless it says otherwise: an Authorization
	// header of its own, or "" for none.
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range c.header {
		req.Header.Set(k, v)
		if v == "" {
			req.Header.Del(k)
		}
	}
	if c.offContract {
		req = apitest.OffContract(req)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestPlaceOrderAnswers(t *testing.T) {
	order := orders.Order{ID: "o1", Status: orders.StatusPlaced, Items: []orders.Item{{SKU: "A-1", Quantity: 2}}}
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		result     orders.Placed
		err        error
		wantStatus int
		wantType   string
		check      func(t *testing.T, w *httptest.ResponseRecorder)
		off        bool // the request breaks the contract on purpose
	}{
		{name: "created", body: `{"items":[{"sku":"A-1","quantity":2}]}`, result: orders.Placed{Order: order},
			wantStatus: 201, check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if w.Header().Get("Location") != "/v1/orders/o1" {
					t.Errorf("Location %q", w.Header().Get("Location"))
				}
			}},
		{name: "the same keys in sibling lines", body: `{"items":[{"sku":"A-1","quantity":2},{"sku":"B-2","quantity":1}]}`,
			result: orders.Placed{Order: order}, wantStatus: 201},
		{name: "replayed", body: `{"items":[{"sku":"A-1","quantity":2}]}`, header: map[string]string{"Idempotency-Key": "k-1"},
			result: orders.Placed{Order: order, Replayed: true}, wantStatus: 201,
			check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if w.Header().Get("Idempotent-Replayed") != "true" {
					t.Error("no Idempotent-Replayed header")
				}
			}},
		{name: "short", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: &orders.InsufficientStockError{SKUs: []string{"A-1"}, Available: map[string]int64{"A-1": 1}},
			wantStatus: 409, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#insufficient-stock", check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if !strings.Contains(w.Body.String(), `"skus":["A-1"]`) {
					t.Errorf("body does not name the SKU: %s", w.Body)
				}
				if !strings.Contains(w.Body.String(), `"available":{"A-1":1}`) || !strings.Contains(w.Body.String(), `A-1 (1 available)`) {
					t.Errorf("body does not say how many are available: %s", w.Body)
				}
			}},
		{name: "invalid values", off: true, body: `{"items":[{"sku":"A 1","quantity":0}]}`,
			err:        &orders.ValidationError{Fields: []orders.FieldError{{Field: "items[0].sku", Message: "bad"}}},
			wantStatus: 422, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#invalid", check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if !strings.Contains(w.Body.String(), `"field":"items[0].sku"`) {
					t.Errorf("body does not name the field: %s", w.Body)
				}
			}},
		{name: "busy", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: orders.ErrBusy, wantStatus: 503, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#busy",
			check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if w.Header().Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
			}},
		{name: "idempotency key reused", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: orders.ErrIdempotencyMismatch, wantStatus: 422},
		{name: "idempotency key conflict", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: orders.ErrIdempotencyConflict, wantStatus: 409},
		{name: "overloaded", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: orders.ErrOverloaded, wantStatus: 503},
		{name: "backend down", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: fmt.Errorf("place: %w", orders.Unavailable(orders.DependencyDatabase, errors.New("dial tcp 10.0.0.1:5432"))),
			wantStatus: 503, check: func(t *testing.T, w *httptest.ResponseRecorder) {
				if strings.Contains(w.Body.String(), "10.0.0.1") {
					t.Errorf("backend address leaked: %s", w.Body)
				}
			}},
		{name: "unexpected error", body: `{"items":[{"sku":"A-1","quantity":2}]}`, err: errors.New("boom"), wantStatus: 500},
		// Refused before the use case is called:
		{name: "malformed", off: true, body: `{"items":[`, wantStatus: 400, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#malformed-body"},
		{name: "trailing data", off: true, body: `{"items":[]} {}`, wantStatus: 400},
		{name: "unknown field", off: true, body: `{"items":[],"coupon":"x"}`, wantStatus: 400},
		{name: "quantity as a string", off: true, body: `{"items":[{"sku":"A-1","quantity":"2"}]}`, wantStatus: 400},
		{name: "duplicate top-level key", off: true, body: `{"items":[{"sku":"A-1","quantity":1}],"items":[{"sku":"A-1","quantity":1000}]}`,
			wantStatus: 400, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#malformed-body"},
		{name: "duplicate key in a line", off: true, body: `{"items":[{"sku":"A-1","quantity":1,"quantity":1000}]}`, wantStatus: 400},
		{name: "duplicate key in another case", off: true, body: `{"items":[{"sku":"A-1","SKU":"B-2","quantity":1}]}`, wantStatus: 400},
		{name: "missing content type", off: true, body: `{"items":[{"sku":"A-1","quantity":2}]}`, header: map[string]string{"Content-Type": ""},
			wantStatus: 415, wantType: "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#unsupported-media-type"},
		{name: "too large", off: true, body: `{"items":[` + strings.Repeat(`{"sku":"A-1","quantity":1},`, 1000) + `]}`, wantStatus: 413},
		{name: "not json", off: true, body: `items=1`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, wantStatus: 415},
		{name: "bad idempotency key", off: true, body: `{"items":[{"sku":"A-1","quantity":2}]}`, header: map[string]string{"Idempotency-Key": "a b"}, wantStatus: 422},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := mocks.NewOrders(t)
			if tc.result.Order.ID != "" || tc.err != nil {
				m.EXPECT().Place(mock.Anything, mock.Anything).Return(tc.result, tc.err).Once()
			}
			w := do(newHandler(t, httpapi.UseCases{Orders: m}), call{method: "POST", path: "/v1/orders", body: tc.body, header: tc.header, offContract: tc.off})
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.wantStatus, w.Body)
			}
			if w.Code >= 400 {
				wantProblem(t, w, tc.wantStatus, tc.wantType)
			}
			if tc.check != nil {
				tc.check(t, w)
			}
		})
	}
}

func TestPlaceOrderPassesItemsAndKey(t *testing.T) {
	m := mocks.NewOrders(t)
	m.EXPECT().Place(mock.Anything, orders.PlaceRequest{
		Items:          []orders.Item{{SKU: "B", Quantity: 1}, {SKU: "A", Quantity: 0}, {SKU: "C", Quantity: 0}},
		IdempotencyKey: "key-1",
	}).Return(orders.Placed{}, &orders.ValidationError{}).Once()
	// 1.5 and 1e9 are numbers, but not quantities: they reach validation as 0.
	do(newHandler(t, httpapi.UseCases{Orders: m}), call{method: "POST", path: "/v1/orders", header: map[string]string{"Idempotency-Key": "key-1"}, offContract: true,
		body: `{"items":[{"sku":"B","quantity":1},{"sku":"A","quantity":1.5},{"sku":"C","quantity":1000000000}]}`})
}

func TestAdminRoutesNeedTheToken(t *testing.T) {
	for _, tc := range []struct {
		name, auth string
		want       int
		detail     string // in the problem's detail
	}{
		{"no header", "", 401, "no Authorization header"},
		{"not bearer", "Basic " + token, 401, `must be \"Bearer \" and the key's secret`},
		{"the token alone", token, 401, `must be \"Bearer \" and the key's secret`},
		{"wrong token", "Bearer nope", 401, "unknown or revoked key"},
		{"right token", "Bearer " + token, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stock, audit := mocks.NewStock(t), mocks.NewAuditor(t)
			if tc.want == 200 {
				stock.EXPECT().RestockOnce(mock.Anything, "A-1", int64(5), "").Return(orders.Stocked{Stock: orders.Stock{SKU: "A-1", Available: 5, Stocked: 5}}, nil).Once()
				audit.EXPECT().Audit(mock.Anything, false).Return(orders.Audit{SKUs: []orders.SKUAudit{}, Consistent: true}, nil).Once()
			}
			h := newHandler(t, httpapi.UseCases{Stock: stock, Audit: audit})
			hdr := map[string]string{"Authorization": tc.auth}
			for _, c := range []call{
				// Without a bearer token the request is off the contract.
				{method: "POST", path: "/v1/skus/A-1/restock", body: `{"quantity":5}`, header: hdr, offContract: tc.want == 401},
				{method: "GET", path: "/v1/audit", header: hdr, offContract: tc.want == 401},
			} {
				w := do(h, c)
				if w.Code != tc.want {
					t.Fatalf("%s %s: %d, want %d", c.method, c.path, w.Code, tc.want)
				}
				if tc.want >= 400 {
					wantProblem(t, w, tc.want, "")
				}
				if !strings.Contains(w.Body.String(), tc.detail) {
					t.Fatalf("%s %s: %s, want a detail with %s", c.method, c.path, w.Body, tc.detail)
				}
			}
		})
	}
}

// A credential in the query string is refused, even beside a good header:
// a secret in a URL ends up in logs and proxies.
func TestCredentialInQueryRefused(t *testing.T) {
	h := newHandler(t, httpapi.UseCases{Audit: mocks.NewAuditor(t)})
	for _, q := range []string{"access_token=" + token, "api_key=x", "token=x", "x=sk_sg_abc"} {
		w := do(h, call{method: "GET", path: "/v1/audit?" + q, offContract: true})
		if w.Code != 401 || !strings.Contains(w.Body.String(), "query string") || w.Header().Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("?%s: %d %s %q, want 401 naming the query string, WWW-Authenticate: Bearer", q, w.Code, w.Body, w.Header().Get("WWW-Authenticate"))
		}
	}
}

func TestReadRoutesAndFallbacks(t *testing.T) {
	m, stock, audit := mocks.NewOrders(t), mocks.NewStock(t), mocks.NewAuditor(t)
	m.EXPECT().Order(mock.Anything, "nope").Return(orders.Order{}, orders.ErrNotFound).Once()
	m.EXPECT().Cancel(mock.Anything, "o1").Return(orders.Order{}, orders.ErrAlreadyCancelled).Once()
	stock.EXPECT().Stock(mock.Anything, "A-1").Return(orders.Stock{SKU: "A-1", Available: 3, Sold: 2, Stocked: 5}, nil).Once()
	audit.EXPECT().Audit(mock.Anything, false).RunAndReturn(func(context.Context, bool) (orders.Audit, error) { panic("kaboom") }).Maybe()
	h := newHandler(t, httpapi.UseCases{Orders: m, Stock: stock, Audit: audit})
	for _, tc := range []struct {
		c    call
		want int
	}{
		{call{method: "GET", path: "/v1/orders/nope"}, 404},
		{call{method: "POST", path: "/v1/orders/o1/cancel"}, 409},
		{call{method: "GET", path: "/v1/skus/A-1"}, 200},
		{call{method: "GET", path: "/v1/nothing", offContract: true}, 404},
		{call{method: "DELETE", path: "/v1/orders", offContract: true}, 405},
		{call{method: "GET", path: "/healthz"}, 200},
		{call{method: "GET", path: "/readyz"}, 200},
		{call{method: "GET", path: "/metrics"}, 200},
		{call{method: "GET", path: "/v1/audit", header: map[string]string{"Authorization": "Bearer " + token}}, 500},
	} {
		w := do(h, tc.c)
		if w.Code != tc.want {
			t.Errorf("%s %s: %d, want %d (%s)", tc.c.method, tc.c.path, w.Code, tc.want, w.Body)
		}
		if tc.want >= 400 {
			wantProblem(t, w, tc.want, "")
		}
		if tc.want == 500 && strings.Contains(w.Body.String(), "kaboom") {
			t.Errorf("panic value reached the client: %s", w.Body)
		}
	}
}

func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, typ string) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("not a problem document: %v: %s", err, w.Body)
	}
	if p.Status != status || p.Title == "" || (typ != "" && p.Type != typ) {
		t.Errorf("problem %+v, want status %d type %q", p, status, typ)
	}
}

// NoAuth, the benchmark's control group, takes a request without a
// credential as the admin's; without it the same request is 401.
func TestNoAuthTakesEveryoneAsTheAdmin(t *testing.T) {
	for _, off := range []bool{false, true} {
		m := mocks.NewAuditor(t)
		if off {
			m.EXPECT().Audit(mock.MatchedBy(func(ctx context.Context) bool { return orders.CallerOf(ctx).Admin() }), false).
				Return(orders.Audit{SKUs: []orders.SKUAudit{}, Consistent: true}, nil).Once()
		}
		reg := prometheus.NewRegistry()
		h := apitest.Handler(t, httpapi.New(httpapi.Config{AdminToken: token, NoAuth: off}, httpapi.UseCases{Audit: m}, nil,
			promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, slog.New(slog.DiscardHandler)))
		w := do(h, call{method: "GET", path: "/v1/audit", header: noAuth, offContract: true})
		if want := map[bool]int{false: 401, true: 200}[off]; w.Code != want {
			t.Errorf("NoAuth %v: %d %s, want %d", off, w.Code, w.Body, want)
		}
	}
}

// limits is a Limiter that allows while allow says so, and counts.
type limits struct {
	allow      bool
	calls      int
	failedAuth int
}

func (l *limits) Allow(context.Context, string, orders.RateLimit) httpapi.RateDecision {
	l.calls++
	return httpapi.RateDecision{Allowed: l.allow, RetryAfter: 1500 * time.Millisecond, Policy: `"default";q=2;w=1`, State: `"default";r=0;t=2`}
}

func (l *limits) FailedAuth(context.Context, string) httpapi.RateDecision {
	l.failedAuth++
	return httpapi.RateDecision{Allowed: l.failedAuth <= 2, RetryAfter: time.Second}
}

// keys is an Authenticator of one client key.
type keys struct{}

func (keys) Authenticate(_ context.Context, secret string) (orders.Caller, error) {
	if secret != "sk_sg_reader" {
		return orders.Caller{}, orders.ErrUnauthenticated
	}
	return orders.Caller{ClientID: "cli_r", Scopes: []orders.Scope{orders.ScopeStockRead}, RateLimit: orders.RateLimit{PerSecond: 1, Burst: 2}}, nil
}

// A client's answers carry the limit's fields; past it, 429 with
// Retry-After, also for a route its scope would refuse; failed
// authentications past theirs are 429 too.
func TestRateLimitAnswers(t *testing.T) {
	l := &limits{allow: true}
	m := mocks.NewStock(t)
	m.EXPECT().Stock(mock.Anything, "A-1").Return(orders.Stock{SKU: "A-1"}, nil).Once()
	reg := prometheus.NewRegistry()
	h := apitest.Handler(t, httpapi.New(httpapi.Config{Auth: keys{}, Limiter: l}, httpapi.UseCases{Stock: m}, nil,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), reg, slog.New(slog.DiscardHandler)))
	reader := map[string]string{"Authorization": "Bearer sk_sg_reader"}
	w := do(h, call{method: "GET", path: "/v1/skus/A-1", header: reader})
	if w.Code != 200 || w.Header().Get("RateLimit-Policy") == "" || w.Header().Get("RateLimit") == "" {
		t.Fatalf("allowed: %d %v", w.Code, w.Header())
	}
	l.allow = false
	for _, path := range []string{"/v1/skus/A-1", "/v1/audit"} {
		w = do(h, call{method: "GET", path: path, header: reader})
		if w.Code != 429 || w.Header().Get("Retry-After") != "2" || !strings.Contains(w.Body.String(), "rate-limited") {
			t.Errorf("%s over the limit: %d %q %s", path, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	var codes []int
	for range 4 {
		codes = append(codes, do(h, call{method: "GET", path: "/v1/skus/A-1", header: map[string]string{"Authorization": "Bearer wrong"}, offContract: true}).Code)
	}
	if !slices.Equal(codes, []int{401, 401, 429, 429}) {
		t.Errorf("failed authentications: %v, want 401 twice then 429", codes)
	}
}

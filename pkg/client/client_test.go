package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

var orderReq = OrderRequest{Items: []Item{{SKU: "A-1", Quantity: 2}}}

func TestLostAnswerRetriedWithTheSameKeyOnANewConnection(t *testing.T) {
	srv, s := serve(t, drop, answer(201, testOrder, "Idempotent-Replayed", "true"))
	c, _ := newTestClient(t, srv)
	var r Response
	got, err := c.PlaceOrder(context.Background(), orderReq, Capture(&r))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "ord_1" {
		t.Errorf("order %+v", got)
	}
	h := s.Hits()
	if len(h) != 2 {
		t.Fatalf("%d requests, want 2", len(h))
	}
	if h[0].Key == "" || h[0].Key != h[1].Key || len(h[0].Key) != 32 {
		t.Errorf("keys %q and %q: want one made key of 32 characters on both", h[0].Key, h[1].Key)
	}
	if h[0].Remote == h[1].Remote {
		t.Errorf("the retry came on the dropped connection %s", h[0].Remote)
	}
	if h[0].Body != h[1].Body || !strings.Contains(h[1].Body, `"sku":"A-1"`) {
		t.Errorf("bodies %q and %q", h[0].Body, h[1].Body)
	}
	if r.Attempts != 2 || !r.Replayed || r.RequestID != "req-1" || r.StatusCode != http.StatusCreated || r.IdempotencyKey != h[0].Key {
		t.Errorf("captured %+v", r)
	}
}

func TestCallersKeyOnEveryAttempt(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemOutcomeUnknown, "dependency", "database"), drop, problem(409, ProblemIdempotencyKeyConflict), answer(201, testOrder))
	c, _ := newTestClient(t, srv)
	if _, err := c.PlaceOrder(context.Background(), orderReq, IdempotencyKey("order-42")); err != nil {
		t.Fatal(err)
	}
	for i, h := range s.Hits() {
		if h.Key != "order-42" {
			t.Errorf("attempt %d key %q", i+1, h.Key)
		}
	}
	if n := len(s.Hits()); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}
}

func TestRetryAfterIsTheLeastWait(t *testing.T) {
	srv, _ := serve(t, answer(503, map[string]any{"type": "x#busy", "title": "Busy", "status": 503},
		"Content-Type", "application/problem+json", "Retry-After", "3"),
		answer(429, nil, "Retry-After", time.Date(2026, 11, 27, 10, 0, 10, 0, time.UTC).Format(http.TimeFormat)),
		answer(201, testOrder))
	c, clock := newTestClient(t, srv)
	if _, err := c.PlaceOrder(context.Background(), orderReq); err != nil {
		t.Fatal(err)
	}
	w := clock.Waits()
	// 3s; then the date is 7s after the fake clock's 10:00:03.
	if len(w) != 2 || w[0] != 3*time.Second || w[1] != 7*time.Second {
		t.Errorf("waits %v, want [3s 7s]", w)
	}
}

func TestBackoffWithoutRetryAfter(t *testing.T) {
	srv, _ := serve(t, answer(502, nil), answer(504, nil), answer(502, nil), answer(200, testOrder))
	c, clock := newTestClient(t, srv)
	if _, err := c.GetOrder(context.Background(), "ord_1"); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if w := clock.Waits(); len(w) != 3 || w[0] != want[0] || w[1] != want[1] || w[2] != want[2] {
		t.Errorf("waits %v, want %v", w, want)
	}
}

func TestMaxAttemptsNothingDone(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemBusy))
	c, _ := newTestClient(t, srv, WithRetry(RetryPolicy{MaxAttempts: 3}))
	_, err := c.PlaceOrder(context.Background(), orderReq)
	var re *RetryError
	if !errors.As(err, &re) || re.Attempts != 3 || !IsBusy(err) {
		t.Fatalf("err %v, want a RetryError of 3 busy attempts", err)
	}
	if errors.Is(err, ErrOutcomeUnknown) {
		t.Error("nothing was done, yet the outcome is said unknown")
	}
	if !strings.Contains(err.Error(), "tried 3 times") {
		t.Errorf("message %q", err)
	}
	if n := len(s.Hits()); n != 3 {
		t.Errorf("%d attempts", n)
	}
}

func TestNoRetries(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemBusy))
	c, _ := newTestClient(t, srv, WithRetry(RetryPolicy{MaxAttempts: 1}))
	_, err := c.PlaceOrder(context.Background(), orderReq)
	var p *Problem
	if !errors.As(err, &p) || p.Name() != ProblemBusy || p.RetryAfter != time.Second {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Hits()); n != 1 {
		t.Errorf("%d attempts", n)
	}
}

func TestOutcomeUnknownAfterExhaustion(t *testing.T) {
	srv, s := serve(t, drop, problem(503, ProblemOutcomeUnknown, "dependency", "database"), problem(503, ProblemBusy))
	c, _ := newTestClient(t, srv)
	_, err := c.PlaceOrder(context.Background(), orderReq, IdempotencyKey("k-7"))
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) {
		t.Fatalf("err %v, want an OutcomeUnknownError", err)
	}
	if ou.IdempotencyKey != "k-7" || ou.Attempts != 6 || ou.Op != "placeOrder" || !IsBusy(ou.Unwrap()) {
		t.Errorf("%+v", ou)
	}
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), `"k-7"`) {
		t.Errorf("err %v", err)
	}
	if n := len(s.Hits()); n != 6 {
		t.Errorf("%d attempts, want 6", n)
	}
}

func TestMaxElapsed(t *testing.T) {
	// Retry-After 20s twice: the second wait would end at 40s, past 30s.
	srv, s := serve(t, answer(503, map[string]any{"type": "x#overloaded", "title": "o", "status": 503},
		"Content-Type", "application/problem+json", "Retry-After", "20"))
	c, clock := newTestClient(t, srv)
	_, err := c.GetSKU(context.Background(), "A-1")
	if !IsOverloaded(err) {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Hits()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
	if w := clock.Waits(); len(w) != 1 {
		t.Errorf("waits %v", w)
	}
}

func TestContextBoundsRetries(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemBusy))
	c, _ := newTestClient(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	c.sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := c.GetSKU(ctx, "A-1")
	if !errors.Is(err, context.Canceled) || !IsBusy(err) {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Hits()); n != 1 {
		t.Errorf("%d attempts", n)
	}

	// A deadline nearer than the wait: no wait is started.
	srv2, s2 := serve(t, answer(503, map[string]any{"type": "x#busy", "title": "b", "status": 503},
		"Content-Type", "application/problem+json", "Retry-After", "60"))
	c2, clock := newTestClient(t, srv2)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	_, err = c2.GetSKU(ctx2, "A-1")
	if !IsBusy(err) || len(s2.Hits()) != 1 || len(clock.Waits()) != 0 {
		t.Errorf("err %v, %d attempts, waits %v", err, len(s2.Hits()), clock.Waits())
	}
}

func TestContextDoneAfterALostAnswerIsUnknown(t *testing.T) {
	srv, _ := serve(t, drop)
	c, _ := newTestClient(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	c.sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	_, err := c.PlaceHold(ctx, HoldRequest{Items: orderReq.Items})
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want outcome unknown and cancelled", err)
	}
}

func TestNoRetryOfARefusal(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		is   func(error) bool
	}{
		{"insufficient-stock", problem(409, ProblemInsufficientStock, "skus", []string{"A-1"}), IsInsufficientStock},
		{"invalid", problem(422, ProblemInvalid, "errors", []map[string]string{{"field": "items[0].quantity", "message": "1..1000"}}), IsInvalid},
		{"key reused", problem(422, ProblemIdempotencyKeyReused), IsIdempotencyKeyReused},
		{"500", answer(500, map[string]any{"type": "about:blank", "title": "Internal Server Error", "status": 500}, "Content-Type", "application/problem+json"),
			func(err error) bool { return IsProblem(err, ProblemAboutBlank) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, s := serve(t, tc.h, answer(201, testOrder))
			c, _ := newTestClient(t, srv)
			_, err := c.PlaceOrder(context.Background(), orderReq)
			if !tc.is(err) {
				t.Fatalf("err %v", err)
			}
			var re *RetryError
			if errors.As(err, &re) {
				t.Errorf("a first answer reported as retried: %v", err)
			}
			if n := len(s.Hits()); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
		})
	}
}

func TestProblemDecoded(t *testing.T) {
	srv, _ := serve(t, problem(409, ProblemInsufficientStock, "skus", []string{"A-1", "B-2"}, "available", map[string]int{"A-1": 1, "B-2": 0}, "future", 7))
	c, _ := newTestClient(t, srv)
	_, err := c.PlaceOrder(context.Background(), orderReq)
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatal(err)
	}
	if p.Status != 409 || p.Name() != ProblemInsufficientStock || len(p.SKUs) != 2 || p.Available["A-1"] != 1 ||
		p.RequestID != "req-insufficient-stock" || string(p.Extensions["future"]) != "7" || len(p.Raw) == 0 {
		t.Errorf("%+v", p)
	}
	if want := "stockguard: 409 insufficient-stock: insufficient-stock (skus A-1, B-2) [request req-insufficient-stock]"; p.Error() != want {
		t.Errorf("Error() = %q, want %q", p.Error(), want)
	}
}

func TestNonProblemAnswerIsAProblem(t *testing.T) {
	page := "<html><body>" + strings.Repeat("x", 100<<10) + "</body></html>"
	srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("X-Request-Id", "edge-9")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(page))
	})
	c, _ := newTestClient(t, srv)
	_, err := c.GetOrder(context.Background(), "ord_1")
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatal(err)
	}
	if p.Type != ProblemAboutBlank || p.Status != 403 || p.Title != "Forbidden" || p.RequestID != "edge-9" ||
		len(p.Raw) != maxErrorBody || !strings.HasPrefix(p.Detail, "<html>") {
		t.Errorf("type %q status %d title %q id %q raw %d", p.Type, p.Status, p.Title, p.RequestID, len(p.Raw))
	}
}

func TestCancelSettledByAlreadyCancelled(t *testing.T) {
	cancelled := testOrder
	cancelled.Status = OrderCancelled
	srv, s := serve(t, drop, problem(409, ProblemAlreadyCancelled), answer(200, cancelled))
	c, _ := newTestClient(t, srv)
	got, err := c.CancelOrder(context.Background(), "ord_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != OrderCancelled {
		t.Errorf("order %+v", got)
	}
	h := s.Hits()
	if len(h) != 3 || h[0].Path != "/v1/orders/ord_1/cancel" || h[1].Path != h[0].Path || h[2].Method != http.MethodGet || h[2].Path != "/v1/orders/ord_1" {
		t.Errorf("requests %+v", h)
	}
	if h[0].Key != "" {
		t.Errorf("cancel sent a key: %q", h[0].Key)
	}
}

func TestCancelAlreadyCancelledFirstIsAnError(t *testing.T) {
	srv, s := serve(t, problem(409, ProblemAlreadyCancelled))
	c, _ := newTestClient(t, srv)
	_, err := c.CancelOrder(context.Background(), "ord_1")
	if !IsAlreadyCancelled(err) || len(s.Hits()) != 1 {
		t.Fatalf("err %v after %d requests", err, len(s.Hits()))
	}
}

func TestCancelAfterOutcomeUnknown(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemOutcomeUnknown, "dependency", "database"), answer(200, testOrder))
	c, _ := newTestClient(t, srv)
	if _, err := c.CancelOrder(context.Background(), "ord_1"); err != nil || len(s.Hits()) != 2 {
		t.Fatalf("err %v after %d requests", err, len(s.Hits()))
	}
}

func TestDeleteSettledByNotFound(t *testing.T) {
	srv, s := serve(t, drop, problem(404, ProblemNotFound))
	c, _ := newTestClient(t, srv)
	if err := c.DeleteWebhook(context.Background(), "wh_1"); err != nil {
		t.Fatal(err)
	}
	if err := c.RevokeKey(context.Background(), "cli_1", "key_1"); !IsNotFound(err) {
		t.Errorf("a 404 to a first attempt: %v", err)
	}
	if n := len(s.Hits()); n != 3 {
		t.Errorf("%d requests", n)
	}
}

func TestSetStockSettledByStaleQuantity(t *testing.T) {
	five, zero := 5, 0
	stock := map[string]any{"sku": "A-1", "available": 5, "reserved": 0, "sold": 0, "stocked": 5, "max_per_customer": 2}
	srv, _ := serve(t, drop, problem(409, ProblemStaleQuantity, "stock", stock))
	c, _ := newTestClient(t, srv)
	two := 2
	st, err := c.SetStock(context.Background(), "A-1", SetStockRequest{Available: 5, ExpectedAvailable: &zero, MaxPerCustomer: &two})
	if err != nil {
		t.Fatal(err)
	}
	if st.Available != 5 || st.Stocked != 5 {
		t.Errorf("stock %+v", st)
	}

	// Another value than the one set: someone else's stock, a real conflict.
	srv2, _ := serve(t, drop, problem(409, ProblemStaleQuantity, "stock", stock))
	c2, _ := newTestClient(t, srv2)
	_, err = c2.SetStock(context.Background(), "A-1", SetStockRequest{Available: 7, ExpectedAvailable: &five})
	var p *Problem
	if !IsStaleQuantity(err) || !errors.As(err, &p) || p.Stock == nil || p.Stock.Available != 5 {
		t.Errorf("err %v", err)
	}
}

func TestSetLocationStockSettled(t *testing.T) {
	zero := 0
	full := Stock{SKU: "A-1", Available: 9, Stocked: 9, Locations: []LocationStock{{Location: "berlin", Available: 4, Stocked: 4}, {Location: "default", Available: 5, Stocked: 5}}}
	srv, s := serve(t, drop, problem(409, ProblemStaleQuantity, "stock", map[string]any{"sku": "A-1", "available": 4, "reserved": 0, "sold": 0, "stocked": 4}), answer(200, full))
	c, _ := newTestClient(t, srv)
	st, err := c.SetLocationStock(context.Background(), "A-1", "berlin", SetLocationStockRequest{Available: 4, ExpectedAvailable: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Locations) != 2 || s.Hits()[2].Path != "/v1/skus/A-1" {
		t.Errorf("stock %+v, requests %+v", st, s.Hits())
	}
}

func TestUnsafeWriteNotRepeatedAfterALostAnswer(t *testing.T) {
	srv, s := serve(t, drop, answer(201, APIClient{ID: "cli_1"}))
	c, _ := newTestClient(t, srv)
	_, err := c.CreateClient(context.Background(), APIClientRequest{Name: "storefront", Scopes: []string{ScopeOrdersWrite}})
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || ou.Attempts != 1 || ou.IdempotencyKey != "" {
		t.Fatalf("err %v", err)
	}
	if n := len(s.Hits()); n != 1 || s.Hits()[0].Key != "" {
		t.Errorf("%d requests, key %q", n, s.Hits()[0].Key)
	}
}

func TestUnsafeWriteRetriedWhenNothingWasDone(t *testing.T) {
	srv, s := serve(t, problem(503, ProblemDependencyUnavailable, "dependency", "database"), problem(429, ProblemRateLimited), answer(201, APIKey{ID: "key_1", Secret: "sk_sg_x"}))
	c, _ := newTestClient(t, srv)
	k, err := c.CreateKey(context.Background(), "cli_1")
	if err != nil || k.Secret != "sk_sg_x" || len(s.Hits()) != 3 {
		t.Fatalf("key %+v err %v after %d", k, err, len(s.Hits()))
	}
}

func TestDialErrorRetried(t *testing.T) {
	srv, _ := serve(t, answer(201, testOrder))
	url := srv.URL
	srv.Close() // nothing listens: connection refused
	c, err := New(url)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	c.now, c.sleep = clock.now, clock.sleep
	_, err = c.CreateLocation(context.Background(), LocationRequest{ID: "berlin", Name: "Berlin"})
	var re *RetryError
	if !errors.As(err, &re) || re.Attempts != 6 || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("err %v, want 6 attempts that sent nothing", err)
	}
}

func TestCaptureAndHeaders(t *testing.T) {
	var got http.Header
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		answer(201, testOrder, "X-Request-Id", "abc", "Idempotent-Replayed", "true")(w, r)
	})
	c, _ := newTestClient(t, srv, WithUserAgent("shop/1.0"))
	var r Response
	if _, err := c.PlaceOrder(context.Background(), orderReq, IdempotencyKey("key-1"), Capture(&r)); err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer sk_test" || got.Get("User-Agent") != "shop/1.0" ||
		got.Get("Content-Type") != "application/json" || got.Get("Idempotency-Key") != "key-1" {
		t.Errorf("request headers %v", got)
	}
	if r.StatusCode != http.StatusCreated || r.RequestID != "abc" || !r.Replayed || r.Attempts != 1 || r.IdempotencyKey != "key-1" || r.Header.Get("X-Request-Id") != "abc" {
		t.Errorf("captured %+v", r)
	}
}

func TestReadyzNotReadyIsAnAnswer(t *testing.T) {
	srv, s := serve(t, answer(503, Readiness{Status: "not ready", Dependencies: []Dependency{{Name: "redis", State: "down", Error: "refused"}}}, "Retry-After", "1"))
	c, _ := newTestClient(t, srv)
	r, err := c.Readyz(context.Background())
	if err != nil || r.Ready() || r.Dependencies[0].Name != "redis" || len(s.Hits()) != 1 {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestAnswerTooLarge(t *testing.T) {
	srv, s := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"`))
		_, _ = w.Write([]byte(strings.Repeat("x", maxAnswer)))
	})
	c, _ := newTestClient(t, srv)
	_, err := c.Healthz(context.Background())
	if !errors.Is(err, errAnswerTooLarge) || len(s.Hits()) != 1 {
		t.Fatalf("err %v after %d", err, len(s.Hits()))
	}
}

func TestBasePathAndEscaping(t *testing.T) {
	var uri string
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		uri = r.RequestURI
		answer(200, testOrder)(w, r)
	})
	c, err := New(srv.URL + "/stock/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOrder(context.Background(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if uri != "/stock/v1/orders/a%2Fb%20c" {
		t.Errorf("request URI %q", uri)
	}
	if _, err := New("ftp://x"); err == nil {
		t.Error("ftp accepted")
	}
}

// A problem's name is the fragment of its type, or the last segment of a
// type without one, absolute or relative; about:blank stays itself.
func TestProblemName(t *testing.T) {
	for typ, want := range map[string]string{
		"https://github.com/stockguard/stockguard/blob/main/docs/problems.md#busy": ProblemBusy,
		"https://errors.example/problems/busy":                                     ProblemBusy,
		"/problems/unknown-location":                                               ProblemUnknownLocation,
		"about:blank":                                                              "about:blank",
	} {
		if got := (&Problem{Type: typ}).Name(); got != want {
			t.Errorf("Name of %q: %q, want %q", typ, got, want)
		}
	}
}

// An invalid field is named once: the server's detail often says it already.
func TestProblemErrorNamesAFieldOnce(t *testing.T) {
	said := &Problem{Status: 422, Type: "#invalid", Detail: "invalid request: url: must be absolute",
		Errors: []FieldError{{Field: "url", Message: "must be absolute"}}}
	unsaid := &Problem{Status: 422, Type: "#invalid", Detail: "invalid request",
		Errors: []FieldError{{Field: "url", Message: "must be absolute"}}}
	if n := strings.Count(said.Error(), "url: must be absolute"); n != 1 {
		t.Errorf("%q names the field %d times", said.Error(), n)
	}
	if !strings.Contains(unsaid.Error(), "; url: must be absolute") {
		t.Errorf("%q does not name the field", unsaid.Error())
	}
}

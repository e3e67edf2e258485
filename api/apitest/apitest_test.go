package apitest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stockguard/stockguard/api/apitest"
)

// problemBase is the contract's base of problem type URIs.
const problemBase = "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#"

// recordingT is a testing.TB whose failures are recorded, not reported: the
// checks of Handler and Transport are checked with it.
type recordingT struct {
	testing.TB
	mu       sync.Mutex // Transport's checks run on the client's goroutine, Handler's on the server's
	failures []string
}

func (r *recordingT) Helper() {}

func (r *recordingT) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recordingT) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

func (r *recordingT) failed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.failures, "\n")
}

// Handler and Transport fail a test on each kind of mismatch, and on none of
// them pass.
func TestCheckersCatchMismatches(t *testing.T) {
	const stock = `{"sku":"A-1","available":1,"reserved":0,"sold":0,"stocked":1}`
	answer := func(status int, ct, body string, hdr ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	problem := func(slug string, status int) string {
		return fmt.Sprintf(`{"type":%q,"title":"t","status":%d,"request_id":"r-1"}`, problemBase+slug, status)
	}
	cases := []struct {
		name     string
		method   string
		path     string
		body     string
		header   map[string]string
		off      bool
		handler  http.HandlerFunc
		wantFail string // "" when the exchange is on the contract
	}{
		{name: "on the contract", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", stock, "X-Request-Id", "r-1")},
		{name: "a problem on the contract", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":1}]}`,
			handler: answer(503, "application/problem+json", problem("busy", 503), "X-Request-Id", "r-1", "Retry-After", "1")},
		{name: "an admin route with a token", method: "GET", path: "/v1/audit?deep=true", header: map[string]string{"Authorization": "Bearer x"},
			handler: answer(403, "application/problem+json", problem("forbidden", 403), "X-Request-Id", "r-1")},
		{name: "no X-Request-Id", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", stock), wantFail: "X-Request-Id"},
		{name: "not the X-Request-Id sent", method: "GET", path: "/v1/skus/A-1", header: map[string]string{"X-Request-Id": "mine"},
			handler: answer(200, "application/json", stock, "X-Request-Id", "r-1"), wantFail: `the request sent "mine"`},
		{name: "a field missing", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", `{"sku":"A-1"}`, "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "a field too many", method: "GET", path: "/v1/skus/A-1",
			handler: answer(200, "application/json", strings.Replace(stock, "}", `,"x":1}`, 1), "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "an undocumented status", method: "GET", path: "/v1/skus/A-1",
			handler: answer(409, "application/problem+json", problem("already-cancelled", 409), "X-Request-Id", "r-1"), wantFail: "status is not supported"},
		{name: "a problem type the operation does not answer", method: "GET", path: "/v1/skus/A-1",
			handler: answer(404, "application/problem+json", problem("no-route", 404), "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "a relative problem type", method: "GET", path: "/v1/skus/A-1",
			handler: answer(404, "application/problem+json", `{"type":"/docs/problems.md#not-found","title":"t","status":404,"request_id":"r-1"}`,
				"X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "503 without Retry-After", method: "GET", path: "/v1/skus/A-1",
			handler: answer(503, "application/problem+json", problem("busy", 503), "X-Request-Id", "r-1"), wantFail: "Retry-After"},
		{name: "request_id not the header's", method: "GET", path: "/v1/skus/A-1",
			handler: answer(404, "application/problem+json", problem("not-found", 404), "X-Request-Id", "r-2"), wantFail: "request_id"},
		{name: "an invalid request", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":0}]}`,
			handler: answer(422, "application/problem+json", problem("invalid", 422), "X-Request-Id", "r-1"), wantFail: "request off the contract"},
		{name: "an invalid request on purpose", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":0}]}`, off: true,
			handler: answer(422, "application/problem+json", problem("invalid", 422), "X-Request-Id", "r-1")},
		{name: "an invalid request on purpose, answered wrong", method: "POST", path: "/v1/orders", body: `{"items":[{"sku":"A-1","quantity":0}]}`, off: true,
			handler: answer(400, "application/problem+json", problem("invalid", 422), "X-Request-Id", "r-1"), wantFail: "off the contract"},
		{name: "no route", method: "GET", path: "/v1/nothing",
			handler: answer(404, "application/problem+json", problem("no-route", 404), "X-Request-Id", "r-1"), wantFail: "no operation"},
		{name: "no route on purpose", method: "GET", path: "/v1/nothing", off: true,
			handler: answer(404, "application/problem+json", problem("no-route", 404), "X-Request-Id", "r-1")},
		{name: "no route on purpose, answered wrong", method: "GET", path: "/v1/nothing", off: true,
			handler: answer(404, "application/problem+json", problem("not-found", 404), "X-Request-Id", "r-1"), wantFail: "Problem-no-route"},
		{name: "an admin route without a token", method: "GET", path: "/v1/audit", header: map[string]string{"Authorization": ""},
			handler:  answer(401, "application/problem+json", problem("unauthorized", 401), "X-Request-Id", "r-1", "WWW-Authenticate", "Bearer x"),
			wantFail: "request off the contract"},
	}
	newRequest := func(method, url, body string, header map[string]string, off bool) *http.Request {
		req := httptest.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
		req.RequestURI = "" // a client's request, for the Transport; the Handler does not read it
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if path := req.URL.Path; path != "/healthz" && path != "/readyz" && path != "/openapi.yaml" {
			req.Header.Set("Authorization", "Bearer x") // every other route needs a credential
		}
		for k, v := range header {
			req.Header.Set(k, v)
			if v == "" {
				req.Header.Del(k)
			}
		}
		if off {
			req = apitest.OffContract(req)
		}
		return req
	}
	check := func(t *testing.T, rt *recordingT, wantFail string) {
		t.Helper()
		failed := rt.failed()
		switch {
		case wantFail == "" && failed != "":
			t.Errorf("failed on the contract: %s", failed)
		case wantFail != "" && !strings.Contains(failed, wantFail):
			t.Errorf("failures %q, want one naming %q", failed, wantFail)
		}
	}
	for _, tc := range cases {
		t.Run("Handler/"+tc.name, func(t *testing.T) {
			rt := &recordingT{TB: t}
			w := httptest.NewRecorder()
			apitest.Handler(rt, tc.handler).ServeHTTP(w, newRequest(tc.method, tc.path, tc.body, tc.header, tc.off))
			if got := w.Header().Get("Content-Type"); got == "" {
				t.Errorf("the answer lost its headers")
			}
			check(t, rt, tc.wantFail)
		})
		t.Run("Transport/"+tc.name, func(t *testing.T) {
			rt := &recordingT{TB: t}
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			client := &http.Client{Transport: apitest.Transport(rt, srv.Client().Transport)}
			resp, err := client.Do(newRequest(tc.method, srv.URL+tc.path, tc.body, tc.header, tc.off))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			want := httptest.NewRecorder()
			tc.handler(want, nil)
			if err != nil || resp.StatusCode != want.Code || string(b) != want.Body.String() {
				t.Errorf("the client got %d %q (%v), the server sent %d %q", resp.StatusCode, b, err, want.Code, want.Body.String())
			}
			check(t, rt, tc.wantFail)
		})
	}
}

// The server behind the Transport reads the body the client sent, and the
// client's request is left as it was.
func TestTransportForwardsTheBody(t *testing.T) {
	const body = `{"items":[{"sku":"A-1","quantity":1}]}`
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		w.Header().Set("X-Request-Id", "r-1")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"`+problemBase+`not-found","title":"t","status":404,"request_id":"r-1"}`)
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: apitest.Transport(t, srv.Client().Transport)}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/reservations/h1/confirm", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer x")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if b := <-got; b != body {
		t.Errorf("the server read %q, the client sent %q", b, body)
	}
	if resp.StatusCode != http.StatusNotFound || req.Header.Get("Content-Type") != "application/json" {
		t.Errorf("status %d, request header %v", resp.StatusCode, req.Header)
	}
}

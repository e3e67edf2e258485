package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeClock stands in for time: sleep advances it at once and records the
// waits, so that tests of backoff never really wait.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, d)
	f.t = f.t.Add(d)
	return nil
}

func (f *fakeClock) Waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.waits...)
}

// newTestClient makes a Client of srv on a fake clock, its jitter the
// backoff's full bound (deterministic).
func newTestClient(t *testing.T, srv *httptest.Server, opts ...Option) (*Client, *fakeClock) {
	t.Helper()
	c, err := New(srv.URL, append([]Option{WithAPIKey("sk_test")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}
	c.now, c.sleep = clock.now, clock.sleep
	c.jitter = func(max time.Duration) time.Duration { return max }
	return c, clock
}

// hit is one request a test server saw.
type hit struct {
	Method, Path, Query, Key, Remote, Body string
}

// script is a test server that answers its requests in turn by the
// handlers given, the last one again once they run out, and records them.
type script struct {
	mu   sync.Mutex
	hits []hit
	fns  []http.HandlerFunc
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.hits = append(s.hits, hit{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Idempotency-Key"), r.RemoteAddr, string(body)})
	fn := s.fns[min(len(s.hits), len(s.fns))-1]
	s.mu.Unlock()
	fn(w, r)
}

func (s *script) Hits() []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hit(nil), s.hits...)
}

func serve(t *testing.T, fns ...http.HandlerFunc) (*httptest.Server, *script) {
	t.Helper()
	s := &script{fns: fns}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, s
}

// drop hijacks the connection and closes it: the request was read, its
// answer is lost.
func drop(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, not a polite close
	}
	_ = conn.Close()
}

// answer writes status and v as JSON, with a request id.
func answer(status int, v any, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		if w.Header().Get("X-Request-Id") == "" {
			w.Header().Set("X-Request-Id", "req-1")
		}
		w.WriteHeader(status)
		if v != nil {
			_ = json.NewEncoder(w).Encode(v)
		}
	}
}

// problem answers the problem name with status, Retry-After 1 for a 503 and
// a 429 as the server does, and extra members.
func problem(status int, name string, extra ...any) http.HandlerFunc {
	body := map[string]any{
		"type":       "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#" + name,
		"title":      name,
		"status":     status,
		"request_id": fmt.Sprintf("req-%s", name),
	}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	headers := []string{"Content-Type", "application/problem+json"}
	if status == 503 || status == 429 {
		headers = append(headers, "Retry-After", "1")
	}
	return answer(status, body, headers...)
}

var testOrder = Order{ID: "ord_1", Status: OrderPlaced, Items: []Line{{SKU: "A-1", Quantity: 2}},
	CreatedAt: time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)}

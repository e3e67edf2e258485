package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/testenv"
)

// The problem types nginx answers with (deploy/nginx.conf).
const nginxProblemBase = "https://github.com/stockguard/stockguard/blob/main/docs/problems.md#"

// nginxGeneratedID is what $request_id looks like.
var nginxGeneratedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// nginxBinary returns nginx's path, or skips when it is missing and real
// servers are not required.
func nginxBinary(t *testing.T) string {
	t.Helper()
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if testenv.RequireReal() {
			t.Fatal("nginx is not on the PATH")
		}
		t.Skip("nginx is not on the PATH")
	}
	return nginx
}

// replaceIn returns an edit for startNginx that replaces old by new, failing the
// test when the configuration no longer holds old: an edit that silently does
// nothing would make a test pass for the wrong reason.
func replaceIn(t *testing.T, old, new string) func(string) string {
	return func(text string) string {
		if !strings.Contains(text, old) {
			t.Fatalf("deploy/nginx.conf has no %q to rewrite", old)
		}
		return strings.ReplaceAll(text, old, new)
	}
}

// nginxOwn sends the requests that nginx answers itself (its 413, 429, 502, 503,
// 504 and /nginx-health) or that reach a stand-in upstream: those answers are not
// the replicas' API, so api/openapi.yaml does not describe them and they are not
// checked against it (checkNginxProblem checks nginx's problems instead).
var nginxOwn = &http.Client{Timeout: 60 * time.Second, Transport: transport}

type nginxAnswer struct {
	status int
	header http.Header
	body   []byte
}

// sendThrough sends a request with c (client(t) when a replica answers it,
// nginxOwn when nginx or a stand-in does) and returns the answer.
func sendThrough(ctx context.Context, t *testing.T, c *http.Client, method, url, body string, header map[string]string) nginxAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return nginxAnswer{resp.StatusCode, resp.Header, b}
}

// checkNginxProblem checks one of nginx's own problem answers: its status, type,
// media type, body fields, Retry-After, and one X-Request-Id equal to the body's
// request_id and to sentID (or one nginx made up when sentID is empty).
func checkNginxProblem(t *testing.T, a nginxAnswer, status int, slug, sentID string, retryAfter bool) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
	}
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var doc struct {
		Type      string `json:"type"`
		Title     string `json:"title"`
		Status    int    `json:"status"`
		Detail    string `json:"detail"`
		RequestID string `json:"request_id"`
	}
	dec := json.NewDecoder(strings.NewReader(string(a.body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("body is not the problem document: %v: %s", err, a.body)
	}
	if doc.Type != nginxProblemBase+slug || doc.Status != status || doc.Title == "" || doc.Detail == "" {
		t.Errorf("problem %+v, want type %s%s, status %d, a title and a detail", doc, nginxProblemBase, slug, status)
	}
	ids := a.header.Values("X-Request-Id")
	if len(ids) != 1 || ids[0] != doc.RequestID {
		t.Errorf("X-Request-Id %q, body request_id %q: want one header equal to the body's", ids, doc.RequestID)
	}
	switch {
	case sentID != "" && doc.RequestID != sentID:
		t.Errorf("request_id %q, want the X-Request-Id sent, %q", doc.RequestID, sentID)
	case sentID == "" && !nginxGeneratedID.MatchString(doc.RequestID):
		t.Errorf("request_id %q, want one made by nginx (32 hex digits)", doc.RequestID)
	}
	want := ""
	if retryAfter {
		want = "1"
	}
	if got := a.header.Get("Retry-After"); got != want {
		t.Errorf("Retry-After %q, want %q", got, want)
	}
}

// nginx in front of real replicas: its 413 and maintenance 503 are problems with
// the request's id, and the replicas' own problems pass through as they are.
func TestNginxProblemsInFrontOfReplicas(t *testing.T) {
	nginx := nginxBinary(t)
	c := startCluster(t, 3)
	maintenance := filepath.Join(t.TempDir(), "maintenance")
	url := startNginx(t, nginx, c.urls, replaceIn(t, "/etc/nginx/maintenance", maintenance))
	ctx := t.Context()

	big := `{"items":[{"sku":"A","quantity":1}],"pad":"` + strings.Repeat("x", 20*1024) + `"}`
	t.Run("413 with the client's id", func(t *testing.T) {
		a := sendThrough(ctx, t, nginxOwn, "POST", url+"/v1/orders", big, map[string]string{"X-Request-Id": "test-413.id:1"})
		checkNginxProblem(t, a, http.StatusRequestEntityTooLarge, "body-too-large", "test-413.id:1", false)
	})
	t.Run("413 with an id made by nginx", func(t *testing.T) {
		a := sendThrough(ctx, t, nginxOwn, "POST", url+"/v1/orders", big, nil)
		checkNginxProblem(t, a, http.StatusRequestEntityTooLarge, "body-too-large", "", false)
	})
	t.Run("an id that is not a plain token is replaced", func(t *testing.T) {
		a := sendThrough(ctx, t, nginxOwn, "POST", url+"/v1/orders", big, map[string]string{"X-Request-Id": `x","status":200,"y":"`})
		checkNginxProblem(t, a, http.StatusRequestEntityTooLarge, "body-too-large", "", false)
	})

	// An invalid order on purpose: the replica's 422 is checked against the
	// contract, the request is not.
	invalid := `{"items":[{"sku":"A","quantity":0}]}`
	direct := sendThrough(ctx, t, offContract(client(t)), "POST", c.urls[0]+"/v1/orders", invalid, map[string]string{"X-Request-Id": "test-422"})
	if direct.status != http.StatusUnprocessableEntity {
		t.Fatalf("the replica answered %d to an invalid order: %s", direct.status, direct.body)
	}
	passesThrough := func(t *testing.T) {
		t.Helper()
		a := sendThrough(ctx, t, offContract(client(t)), "POST", url+"/v1/orders", invalid, map[string]string{"X-Request-Id": "test-422"})
		if a.status != direct.status || string(a.body) != string(direct.body) ||
			a.header.Get("Content-Type") != direct.header.Get("Content-Type") {
			t.Fatalf("through nginx: %d %s %s; from the replica: %d %s %s", a.status, a.header.Get("Content-Type"), a.body,
				direct.status, direct.header.Get("Content-Type"), direct.body)
		}
		if ids := a.header.Values("X-Request-Id"); len(ids) > 1 {
			t.Errorf("X-Request-Id %q: nginx added one to the replica's answer", ids)
		}
	}
	t.Run("a replica's problem passes through", passesThrough)

	t.Run("503 in maintenance", func(t *testing.T) {
		if err := os.WriteFile(maintenance, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		a := sendThrough(ctx, t, nginxOwn, "POST", url+"/v1/orders", invalid, map[string]string{"X-Request-Id": "test-503"})
		checkNginxProblem(t, a, http.StatusServiceUnavailable, "unavailable", "test-503", true)
		if h := sendThrough(ctx, t, nginxOwn, "GET", url+"/nginx-health", "", nil); h.status != http.StatusOK {
			t.Errorf("nginx health %d in maintenance, want 200: nginx itself is up", h.status)
		}
		if err := os.Remove(maintenance); err != nil {
			t.Fatal(err)
		}
		passesThrough(t) // the switch is off again: requests reach the replicas
	})
}

// An upstream where nothing listens: nginx answers 502 itself.
func TestNginxProblemBadGateway(t *testing.T) {
	nginx := nginxBinary(t)
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close()
	url := startNginx(t, nginx, []string{closed, closed, closed})
	a := sendThrough(t.Context(), t, nginxOwn, "POST", url+"/v1/orders", `{"items":[{"sku":"A","quantity":1}]}`, map[string]string{"X-Request-Id": "test-502"})
	checkNginxProblem(t, a, http.StatusBadGateway, "bad-gateway", "test-502", false)
	a = sendThrough(t.Context(), t, nginxOwn, "GET", url+"/v1/orders/x", "", nil)
	checkNginxProblem(t, a, http.StatusBadGateway, "bad-gateway", "", false)
}

// An upstream that takes the request and never answers: nginx answers 504 once
// proxy_read_timeout (shortened here) has passed.
func TestNginxProblemGatewayTimeout(t *testing.T) {
	nginx := nginxBinary(t)
	h := startHoldUpstream(t)
	url := startNginx(t, nginx, []string{h.url, h.url, h.url}, replaceIn(t, "proxy_read_timeout 30s;", "proxy_read_timeout 1s;"))
	a := sendThrough(t.Context(), t, nginxOwn, "POST", url+"/v1/orders", `{"items":[{"sku":"A","quantity":1}]}`, map[string]string{"X-Request-Id": "test-504"})
	checkNginxProblem(t, a, http.StatusGatewayTimeout, "gateway-timeout", "test-504", false)
	if h.requests() != 1 {
		t.Errorf("the upstream got %d requests, want 1: a POST is not sent twice", h.requests())
	}
}

// One request in progress from this address, a limit of one (lowered here from
// the shipped 256): the second is answered 429 by nginx.
func TestNginxProblemRateLimited(t *testing.T) {
	nginx := nginxBinary(t)
	h := startHoldUpstream(t)
	url := startNginx(t, nginx, []string{h.url, h.url, h.url}, replaceIn(t, "limit_conn perclient 256;", "limit_conn perclient 1;"))

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/orders", strings.NewReader(`{"items":[{"sku":"A","quantity":1}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := nginxOwn.Do(req) // nginx answers it 502 once released
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		first <- err
	}()
	h.waitFor(t, 1) // the first request is in progress at the upstream

	a := sendThrough(ctx, t, nginxOwn, "GET", url+"/v1/orders/x", "", map[string]string{"X-Request-Id": "test-429"})
	checkNginxProblem(t, a, http.StatusTooManyRequests, "rate-limited", "test-429", true)
	if h.requests() != 1 {
		t.Errorf("the upstream got %d requests, want 1: the limited one must not reach it", h.requests())
	}

	h.release() // the first request ends (nginx answers it 502)
	select {
	case err := <-first:
		if err != nil {
			t.Errorf("the held request: %v; want nginx's answer once its upstream closed", err)
		}
	case <-ctx.Done():
		t.Fatal("the held request did not end once its upstream connection closed")
	}
}

// X-Request-Id reaches the replicas: the client's when it is a plain token, else
// one nginx makes up. nginx does not add it to a replica's answer.
func TestNginxForwardsRequestID(t *testing.T) {
	nginx := nginxBinary(t)
	seen := make(chan []string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ids := r.Header.Values("X-Request-Id")
		if r.URL.Query().Get("echo") == "1" && len(ids) == 1 {
			w.Header().Set("X-Request-Id", ids[0]) // as the replicas will
		}
		seen <- ids
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(up.Close)
	url := startNginx(t, nginx, []string{up.URL, up.URL, up.URL})

	for _, tc := range []struct {
		name, sent, query string
		want              func(string) bool
		echoed            int
	}{
		{"the client's", "client-id-1", "?echo=1", func(id string) bool { return id == "client-id-1" }, 1},
		{"none sent", "", "", nginxGeneratedID.MatchString, 0},
		{"none sent, echoed", "", "?echo=1", nginxGeneratedID.MatchString, 1},
		{"not a plain token", "a b\"c", "", nginxGeneratedID.MatchString, 0},
		{"too long", strings.Repeat("a", 129), "", nginxGeneratedID.MatchString, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tc.sent != "" {
				hdr["X-Request-Id"] = tc.sent
			}
			a := sendThrough(t.Context(), t, nginxOwn, "GET", url+"/v1/skus/A"+tc.query, "", hdr) // a stand-in upstream answers
			var ids []string
			select {
			case ids = <-seen:
			default:
				t.Fatalf("the upstream was not called: %d %s", a.status, a.body)
			}
			if a.status != http.StatusOK || len(ids) != 1 || !tc.want(ids[0]) {
				t.Fatalf("status %d, upstream saw X-Request-Id %q", a.status, ids)
			}
			if got := a.header.Values("X-Request-Id"); len(got) != tc.echoed || (tc.echoed == 1 && got[0] != ids[0]) {
				t.Errorf("answer's X-Request-Id %q, want %d equal to %q", got, tc.echoed, ids[0])
			}
		})
	}
}

// holdUpstream accepts connections, reads each request's head and never answers.
type holdUpstream struct {
	url   string
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
	got   int
	wake  chan struct{} // a request head was read
}

func startHoldUpstream(t *testing.T) *holdUpstream {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &holdUpstream{url: "http://" + l.Addr().String(), l: l, wake: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			h.mu.Lock()
			h.conns = append(h.conns, conn)
			h.mu.Unlock()
			wg.Go(func() { h.readHead(conn) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		h.release()
		wg.Wait()
	})
	return h
}

func (h *holdUpstream) readHead(conn net.Conn) {
	r := bufio.NewReader(conn)
	for range 100 { // a request head has far fewer lines
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line == "\r\n" {
			h.mu.Lock()
			h.got++
			h.mu.Unlock()
			select {
			case h.wake <- struct{}{}:
			default:
			}
			break
		}
	}
	_, _ = io.Copy(io.Discard, conn) // hold until released
}

func (h *holdUpstream) requests() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

// waitFor waits until n request heads have been read.
func (h *holdUpstream) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for h.requests() < n {
		select {
		case <-h.wake:
		case <-deadline:
			t.Fatalf("the upstream got %d requests, want %d", h.requests(), n)
		}
	}
}

// release closes every connection taken so far.
func (h *holdUpstream) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

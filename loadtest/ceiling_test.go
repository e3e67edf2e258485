package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pathCounter answers GET /healthz, every fourth time with a 503, and notes
// every other request: a ceiling run must send nothing else.
type pathCounter struct {
	mu            sync.Mutex
	ok, failed    int64
	unexpected    []string
	healthzCalled int64
}

func (p *pathCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Method != http.MethodGet || r.URL.Path != "/healthz" {
		p.unexpected = append(p.unexpected, r.Method+" "+r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
		return
	}
	p.healthzCalled++
	if p.healthzCalled%4 == 0 {
		p.failed++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	p.ok++
	_, _ = w.Write([]byte(`{"status":"ok"}`))
}

func TestCeilingSendsOnlyItsGETs(t *testing.T) {
	p := &pathCounter{}
	srv := httptest.NewServer(p)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "summary.json")
	var stdout, stderr bytes.Buffer
	began := time.Now()
	err := run(t.Context(), []string{"-url", srv.URL, "-ceiling", "/healthz", "-vus", "4", "-duration", "300ms",
		"-summary-json", path, "-quiet"}, func(string) string { return "" }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.unexpected) > 0 {
		t.Fatalf("a ceiling run sent %d other requests (seeding, orders or an audit?): %v", len(p.unexpected), p.unexpected[:min(5, len(p.unexpected))])
	}
	if p.ok == 0 || p.failed == 0 {
		t.Fatalf("the server answered %d 200s and %d 503s; want some of each", p.ok, p.failed)
	}

	// The JSON summary reads with the fields cmd/bench reads an order run by.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Seconds  float64 `json:"duration_s"`
		Reqs     int64   `json:"http_reqs"`
		Failed   float64 `json:"http_req_failed"`
		Accepted int64   `json:"orders_accepted"`
		Latency  struct {
			P50 float64 `json:"med"`
			P95 float64 `json:"p(95)"`
			P99 float64 `json:"p(99)"`
		} `json:"http_req_duration_ms"`
		Ceiling string          `json:"ceiling"`
		Audit   json.RawMessage `json:"audit"`
		Started time.Time       `json:"started_at"`
		Ended   time.Time       `json:"ended_at"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	// Every request ends within the run's graceful stop, so the server and the
	// summary count the same ones.
	if sum.Reqs != p.ok+p.failed || sum.Accepted != p.ok {
		t.Fatalf("summary: %d requests, %d accepted; the server answered %d 200s and %d 503s", sum.Reqs, sum.Accepted, p.ok, p.failed)
	}
	if want := float64(p.failed) / float64(p.ok+p.failed); sum.Failed != want {
		t.Fatalf("http_req_failed %v, want %v", sum.Failed, want)
	}
	if sum.Seconds <= 0 || sum.Latency.P50 <= 0 || sum.Latency.P95 < sum.Latency.P50 || sum.Latency.P99 < sum.Latency.P95 {
		t.Fatalf("duration %vs, latency med %v p(95) %v p(99) %v", sum.Seconds, sum.Latency.P50, sum.Latency.P95, sum.Latency.P99)
	}
	// The load's window, for a tool that samples the service's resources.
	if sum.Started.Before(began) || sum.Ended.After(time.Now()) || sum.Ended.Sub(sum.Started).Seconds() != sum.Seconds {
		t.Fatalf("window %v to %v (%vs), run began %v: want the load's %vs within the run", sum.Started, sum.Ended,
			sum.Ended.Sub(sum.Started).Seconds(), began, sum.Seconds)
	}
	if sum.Ceiling != "/healthz" || sum.Audit != nil {
		t.Fatalf("ceiling %q, audit %s: want the path, and no audit", sum.Ceiling, sum.Audit)
	}
	text := stdout.String()
	if !strings.Contains(text, "ceiling") || strings.Contains(text, "units_sold") {
		t.Fatalf("the text summary should name the ceiling and no audit:\n%s", text)
	}
}

func TestCeilingWantsAPath(t *testing.T) {
	for _, bad := range []string{"healthz", "http://x/healthz", "/a b"} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), []string{"-url", "http://127.0.0.1:1", "-ceiling", bad, "-quiet"},
			func(string) string { return "" }, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "ceiling") {
			t.Errorf("-ceiling %q: %v, want refused", bad, err)
		}
	}
}

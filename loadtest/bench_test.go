package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
)

// trivial answers every order at once, as a service with nothing to do would.
func trivial() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/audit" {
			_, _ = w.Write([]byte(`{"skus":[],"oversold":0,"consistent":true}`))
			return
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"type":"/problems/insufficient-stock","title":"Insufficient stock","status":409}`))
	})
}

// BenchmarkGeneratorVsWrk: the generator must not be the bottleneck. Against a
// trivial handler on loopback, in the same run: its requests per second against
// wrk's with as many connections, and its peak memory at 1,000 VUs. Run with
// -benchtime 1x; needs wrk (Debian package).
func BenchmarkGeneratorVsWrk(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		skipOrFail(b, "BenchmarkGeneratorVsWrk skipped: wrk is not on the PATH (install the wrk package)")
	}
	srv := httptest.NewServer(trivial())
	defer srv.Close()
	dir := b.TempDir()
	bin := filepath.Join(dir, "loadtest")
	if out, err := exec.CommandContext(context.Background(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	const conns, secs = 64, 5

	ours := func(vus int) (rps float64, rssMiB float64) {
		summary := filepath.Join(dir, fmt.Sprintf("s-%d.json", vus))
		cmd := exec.CommandContext(context.Background(), bin, "-url", srv.URL, "-vus", strconv.Itoa(vus),
			"-duration", fmt.Sprintf("%ds", secs), "-stock", "0", "-retry", "0", "-cancel", "0", "-multi", "0",
			"-summary-json", summary, "-quiet")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("loadtest: %v\n%s", err, out)
		}
		raw, err := os.ReadFile(summary)
		if err != nil {
			b.Fatal(err)
		}
		var s struct {
			Reqs float64 `json:"http_reqs"`
			Dur  float64 `json:"duration_s"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			b.Fatal(err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		return s.Reqs / s.Dur, float64(ru.Maxrss) / 1024 // Maxrss is in KiB on Linux
	}

	script := filepath.Join(dir, "post.lua")
	lua := `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"items":[{"sku":"S-0","quantity":1}]}'
wrk.path = "/v1/orders"
`
	if err := os.WriteFile(script, []byte(lua), 0o600); err != nil {
		b.Fatal(err)
	}
	out, err := exec.CommandContext(context.Background(), wrk, "-t2", fmt.Sprintf("-c%d", conns), fmt.Sprintf("-d%ds", secs), "-s", script, srv.URL+"/v1/orders").CombinedOutput()
	if err != nil {
		b.Fatalf("wrk: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		b.Fatalf("wrk printed no rate:\n%s", out)
	}
	wrkRPS, _ := strconv.ParseFloat(string(m[1]), 64)
	ourRPS, _ := ours(conns)
	_, rss1000 := ours(1000)

	b.ReportMetric(ourRPS, "req/s")
	b.ReportMetric(wrkRPS, "wrk-req/s")
	b.ReportMetric(ourRPS/wrkRPS, "ratio")
	b.ReportMetric(rss1000, "MiB-at-1000-VUs")
	fmt.Printf("loadtest %.0f req/s, wrk %.0f req/s with %d connections: %.2fx; peak RSS at 1,000 VUs %.1f MiB\n",
		ourRPS, wrkRPS, conns, ourRPS/wrkRPS, rss1000)
}

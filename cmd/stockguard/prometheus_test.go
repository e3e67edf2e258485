package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/stockguard/stockguard/internal/topology"
)

// A real Prometheus (Debian's prometheus) scrapes three real replicas with the
// repository's scrape configuration and alert rules: the orders it records are
// the orders the test placed, and stopping a replica fires StockguardReplicaDown.
func TestPrometheusScrapesReplicasAndAlerts(t *testing.T) {
	promBin := needTool(t, "prometheus", "prometheus")
	c := startCluster(t, 0) // the database migrated; the replicas are the test's own, to stop one
	env := clusterEnv(c)
	var replicas []*ownReplica
	for i := range 3 {
		replicas = append(replicas, startOwnReplica(t, i, env))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var targets []string
	for _, r := range replicas {
		targets = append(targets, strings.TrimPrefix(r.url, "http://"))
	}
	prom := startPrometheus(t, promBin, targets)

	// Every replica scraped, and no alert for a replica down yet.
	prom.poll(ctx, t, 30*time.Second, "three targets up", func() (bool, string) {
		v, err := prom.scalar(ctx, `sum(up{job="stockguard"})`)
		return err == nil && v == 3, fmt.Sprintf("sum(up) = %v (%v)", v, err)
	})
	if firing := prom.firing(ctx, t, "StockguardReplicaDown"); len(firing) > 0 {
		t.Fatalf("StockguardReplicaDown fires with every replica up: %v", firing)
	}

	// 300 orders, round-robin over the replicas, from 8 workers; plenty of stock.
	skus := []string{"P1", "P2", "P3"}
	for _, sku := range skus {
		admin(ctx, t, "POST", replicas[0].url+"/v1/skus/"+sku+"/restock", `{"quantity":1000}`, nil)
	}
	const n = 300
	placed := make([]int, len(replicas)) // 201s per replica
	var mu sync.Mutex
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				r := i % len(replicas)
				body := fmt.Sprintf(`{"items":[{"sku":%q,"quantity":1}]}`, skus[i%len(skus)])
				status, b, err := call(ctx, t, "POST", replicas[r].url+"/v1/orders", body, nil)
				if err != nil {
					errs <- fmt.Errorf("order %d: %w", i, err)
					return
				}
				if status != http.StatusCreated {
					errs <- fmt.Errorf("order %d: %d %s", i, status, b)
					return
				}
				mu.Lock()
				placed[r]++
				mu.Unlock()
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// What Prometheus recorded, once its last scrape has the last order: the sum,
	// each replica's share, and the HTTP layer's count of 201s agree exactly.
	prom.poll(ctx, t, 30*time.Second, "Prometheus to record every order", func() (bool, string) {
		v, err := prom.scalar(ctx, `sum(stockguard_orders_placed_total{job="stockguard"})`)
		return err == nil && v == n, fmt.Sprintf("sum(stockguard_orders_placed_total) = %v (%v), want %d", v, err, n)
	})
	for i, r := range replicas {
		q := fmt.Sprintf(`stockguard_orders_placed_total{job="stockguard",instance=%q}`, targets[i])
		if v, err := prom.scalar(ctx, q); err != nil || v != float64(placed[i]) {
			t.Errorf("%s: %v (%v), the test placed %d there", r.url, v, err, placed[i])
		}
	}
	q := `sum(stockguard_http_requests_total{job="stockguard",route="/v1/orders",method="POST",status="201"})`
	if v, err := prom.scalar(ctx, q); err != nil || v != n {
		t.Errorf("%s = %v (%v), want %d", q, v, err, n)
	}
	t.Logf("%d orders in %s (%.0f/s from the client); Prometheus recorded %d, per replica %v",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), n, placed)

	// The fault: a replica stopped. Its alert fires; the others' do not.
	stoppedAt := time.Now()
	replicas[2].stop(t)
	prom.poll(ctx, t, 60*time.Second, "StockguardReplicaDown to fire for the stopped replica", func() (bool, string) {
		firing := prom.firing(ctx, t, "StockguardReplicaDown")
		return len(firing) == 1 && firing[0] == targets[2], fmt.Sprintf("firing for %v", firing)
	})
	t.Logf("StockguardReplicaDown fired for %s %s after its SIGTERM", targets[2], time.Since(stoppedAt).Round(time.Millisecond))
}

// clusterEnv is the environment startCluster gives its replicas.
func clusterEnv(c *cluster) []string {
	return append(os.Environ(), "DATABASE_URL="+c.dbURL, "REDIS_URL="+c.redis.URL(),
		"STOCKGUARD_NAMESPACE="+c.redis.Namespace, "STOCKGUARD_ADMIN_TOKEN="+adminToken,
		"STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOCK_WAIT=20s", "STOCKGUARD_REQUEST_TIMEOUT=30s", testDBConns,
		"STOCKGUARD_SHUTDOWN_TIMEOUT=30s", "STOCKGUARD_LOG_LEVEL=warn")
}

// ownReplica is a replica the test can stop before it ends.
type ownReplica struct {
	url      string
	cmd      *exec.Cmd
	stopOnce sync.Once
}

func startOwnReplica(t *testing.T, i int, env []string) *ownReplica {
	t.Helper()
	r := &ownReplica{cmd: exec.CommandContext(context.WithoutCancel(t.Context()), binary, "serve")}
	r.cmd.Env = env
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("replica-%d.log", i))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stderr = logFile
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.stop(t)
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("replica %d log:\n%s", i, b)
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("replica %d printed no address", i)
	}
	addr, ok := topology.ListenAddr(lines.Text())
	if !ok {
		t.Fatalf("replica %d: unexpected first line %q", i, lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	r.url = "http://" + addr
	return r
}

// stop sends SIGTERM and waits for the replica to exit (it shuts down
// gracefully), killing it after 20s.
func (r *ownReplica) stop(t *testing.T) {
	r.stopOnce.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("replica %s did not stop within 20s of SIGTERM; killed", r.url)
			_ = r.cmd.Process.Kill()
			<-done
		}
	})
}

// promServer is a running Prometheus and its HTTP API.
type promServer struct{ url string }

// startPrometheus runs prometheus with the repository's prometheus.yml and
// rules.yml, changed for a test: the replicas as targets, 1s intervals, and
// every rule's "for" cut to 1s so that an alert fires within seconds.
func startPrometheus(t *testing.T, bin string, targets []string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile("../../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 1s"))
	writeFile(t, filepath.Join(dir, "rules.yml"), rules)

	var cfg map[string]any
	raw, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	scrapes, _ := cfg["scrape_configs"].([]any)
	if len(scrapes) != 1 {
		t.Fatalf("prometheus.yml: %d scrape configs, want the one of the replicas", len(scrapes))
	}
	job, _ := scrapes[0].(map[string]any)
	if job["job_name"] != "stockguard" {
		t.Fatalf("prometheus.yml: job %v, the rules expect job=\"stockguard\"", job["job_name"])
	}
	job["static_configs"] = []any{map[string]any{"targets": targets}}
	// The test's replicas serve /metrics on their API's listener, where it
	// needs the admin scope (compose's listen on --metrics-addr, without).
	job["authorization"] = map[string]any{"type": "Bearer", "credentials": adminToken}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "prometheus.yml"), out)

	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{url: "http://" + addr}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p.poll(ctx, t, 30*time.Second, "prometheus to be ready", func() (bool, string) {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus exited:\n%s", b)
		default:
		}
		status, _, err := promCall(ctx, p.url+"/-/ready")
		return err == nil && status == http.StatusOK, fmt.Sprintf("GET /-/ready: %d %v", status, err)
	})
	return p
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// poll calls cond every 200ms until it holds, failing the test with cond's last
// word after within.
func (p *promServer) poll(ctx context.Context, t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %s", within, what, last)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (%s)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// scalar runs an instant query whose answer is one sample, and returns it.
func (p *promServer) scalar(ctx context.Context, query string) (float64, error) {
	status, b, err := promCall(ctx, p.url+"/api/v1/query?query="+url.QueryEscape(query))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		return 0, fmt.Errorf("query %s: %d %w", query, status, err)
	}
	if status != http.StatusOK || resp.Status != "success" {
		return 0, fmt.Errorf("query %s: %d %s", query, status, b)
	}
	if len(resp.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1", query, len(resp.Data.Result))
	}
	s, _ := resp.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// firing returns the instances for which alert is firing (not pending).
func (p *promServer) firing(ctx context.Context, t *testing.T, alert string) []string {
	t.Helper()
	status, b, err := promCall(ctx, p.url+"/api/v1/alerts")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /api/v1/alerts: %d %v %s", status, err, b)
	}
	var resp struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("alerts: %v %s", err, b)
	}
	var out []string
	for _, a := range resp.Data.Alerts {
		if a.Labels["alertname"] == alert && a.State == "firing" {
			out = append(out, a.Labels["instance"])
		}
	}
	return out
}

// promClient asks Prometheus, whose answers are not the contract's.
var promClient = &http.Client{Timeout: 30 * time.Second, Transport: transport}

// promCall GETs url from Prometheus and returns the answer's status and body.
func promCall(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return 0, nil, err
	}
	resp, err := promClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

//go:build compose

// Package compose runs docker-compose.yml on a real Docker Engine, as a user
// runs it, and checks the stack from outside: the demo's tables, Prometheus's
// API, nginx's answers, the database read directly, and a round under faults
// (a replica killed, Redis restarted). "make compose-test" runs it; engine.sh
// provides the engine and standins.sh the images no registry can give here.
package compose

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	project    = "stockguardtest" // not the user's own stack's name
	adminToken = "change-me"      // docker-compose.yml's
	nginxURL   = "http://127.0.0.1:8080"
	promURL    = "http://127.0.0.1:9090"
)

// root is the repository: the compose file and its build context.
const root = "../.."

var httpClient = &http.Client{Timeout: 10 * time.Second}

func TestComposeStack(t *testing.T) {
	// Ctrl-C cancels ctx instead of killing the test, so that "down -v" runs.
	ctx, stop := signal.NotifyContext(t.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 75*time.Minute)
	defer cancel()

	step(t, "engine")
	run(ctx, t, "bash", "scripts/compose/engine.sh", "ensure")
	t.Cleanup(func() { runQuiet(context.WithoutCancel(ctx), "bash", "scripts/compose/engine.sh", "stop") })
	composeCmd := strings.Fields(strings.TrimSpace(output(ctx, t, "bash", "scripts/compose/engine.sh", "compose")))
	t.Logf("compose tool: %s (%s)", strings.Join(composeCmd, " "),
		strings.TrimSpace(output(ctx, t, append(composeCmd, "version")...)))

	step(t, "stand-in images")
	run(ctx, t, "bash", "scripts/compose/standins.sh")
	// The build stage's "go mod download" needs the network, which containers on
	// an engine started with --iptables=false do not have: a build on the host's
	// network fills that layer of the cache, and compose's own build reuses it.
	run(ctx, t, "docker", "build", "--network", "host", "--target", "build", "-t", project+"-build-cache", ".")

	// STOCKGUARD_COMPOSE_FILE runs another file of the repository's root, such as
	// a deliberately broken copy, to see this test fail.
	file := cmp.Or(os.Getenv("STOCKGUARD_COMPOSE_FILE"), "docker-compose.yml")
	dc := func(args ...string) []string {
		return append(append(append([]string{}, composeCmd...), "-p", project, "-f", file), args...)
	}
	t.Cleanup(func() { // always: on failure and on Ctrl-C too
		step(t, "down -v")
		runQuiet(context.WithoutCancel(ctx), dc("down", "-v", "--remove-orphans", "-t", "5")...)
	})
	runQuiet(ctx, dc("down", "-v", "--remove-orphans", "-t", "5")...) // what an interrupted run left

	// The images first, so that the time to healthy below is the stack's own;
	// "up --build" then finds every layer in the cache.
	step(t, "docker compose build")
	built := time.Now()
	run(ctx, t, dc("build")...)
	t.Logf("docker compose build: %s", time.Since(built).Round(time.Second))

	step(t, "docker compose up --build --exit-code-from demo demo")
	started := time.Now()
	watch := watchHealth(ctx, started)
	demoOut, code := stream(ctx, t, dc("up", "--build", "--exit-code-from", "demo", "demo")...)
	healthyAfter, createdAfter := watch()
	if healthyAfter < 0 {
		t.Logf("docker compose up: demo exited %d after %s; not every service became healthy", code, time.Since(started).Round(time.Second))
	} else {
		t.Logf("docker compose up: demo exited %d after %s; every service healthy %s after up, %s after its first container "+
			"appeared (before that: the images' cached rebuild and the containers' creation)",
			code, time.Since(started).Round(time.Second), healthyAfter, healthyAfter-createdAfter)
	}
	if code != 0 {
		h, _ := health(ctx)
		t.Logf("health: %v; the last lines of every service:", h)
		_, _ = stream(ctx, t, dc("logs", "--no-color", "--tail", "5")...)
		t.Fatalf("docker compose up --exit-code-from demo exited %d", code)
	}
	accepted, events := checkDemoTables(t, demoOut)
	checkDemoCallers(t, demoOut)
	logImageSize(ctx, t, "stockguard:local")

	step(t, "the stack again, without the demo")
	restarted := time.Now()
	watch = watchHealth(ctx, restarted)
	run(ctx, t, dc("up", "-d", "--no-build", "nginx", "prometheus")...)
	if d, _ := watch(); d < 0 {
		t.Fatal("the stack did not become healthy again")
	} else {
		t.Logf("docker compose up -d (containers kept): every service healthy %s after up", d)
	}
	checkPrometheus(ctx, t, accepted)
	checkNginxProblem(ctx, t)
	// A client of the test's own, made through nginx with the admin token:
	// the HTTPS checks and the fault round call with its key.
	key := newClient(ctx, t, "compose-test", "orders:write", "holds:write", "orders:read", "stock:read")
	step(t, "HTTPS through nginx")
	checkHTTPS(ctx, t, dc, key)
	// The demo read its rounds' events from the feed; the relay published
	// them to JetStream too.
	waitStreamHolds(ctx, t, dc, int64(events), "the demo's rounds' events")

	step(t, "faults: a replica killed and Redis restarted during a round")
	faultRound(ctx, t, dc, key)
}

// step marks the log so that a long run shows where it is.
func step(t *testing.T, what string) { t.Logf("%s ==> %s", time.Now().UTC().Format("15:04:05"), what) }

func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = root
	// The classic builder: BuildKit would look for its frontend and cache in a
	// registry, and Compose 1.29 builds through the engine's API anyway.
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0", "COMPOSE_DOCKER_CLI_BUILD=0", "COMPOSE_INTERACTIVE_NO_CLI=1")
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs a command to its end, its output in the test's log, and fails the
// test when it fails.
func run(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	if out, code := stream(ctx, t, args...); code != 0 {
		t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), code, tail(out, 40))
	}
}

// runQuiet runs a command whose failure changes nothing (a cleanup).
func runQuiet(ctx context.Context, args ...string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_ = command(ctx, args...).Run()
}

// output runs a command and returns its stdout.
func output(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := command(ctx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// stream runs a command with its output, line by line, in the test's log as it
// comes (a long build shows progress), and returns the output and exit code.
func stream(ctx context.Context, t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := command(ctx, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var buf strings.Builder
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		lines := bufio.NewScanner(pr)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			buf.WriteString(lines.Text() + "\n")
			t.Logf("%6.1fs %s", time.Since(start).Seconds(), lines.Text()) // where a long step spends its time
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	_ = pw.Close()
	<-done
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return buf.String(), exit.ExitCode()
		}
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return buf.String(), 0
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// containers maps the stack's services to their containers' ids.
func containers(ctx context.Context) (map[string]string, error) {
	cmd := command(ctx, "docker", "ps", "-a", "--filter", "label=com.docker.compose.project="+project,
		"--format", `{{.Label "com.docker.compose.service"}} {{.ID}}`)
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if svc, id, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			ids[svc] = id
		}
	}
	return ids, nil
}

// health is each service's health: healthy, starting, unhealthy, or "" for a
// container without a health check (migrate, demo).
func health(ctx context.Context) (map[string]string, error) {
	ids, err := containers(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	args := []string{"docker", "inspect", "--format",
		`{{index .Config.Labels "com.docker.compose.service"}} {{if .State.Health}}{{.State.Health.Status}}{{end}}`}
	for _, id := range ids {
		args = append(args, id)
	}
	out, err := command(ctx, args...).Output()
	if err != nil {
		return nil, err
	}
	h := map[string]string{}
	for line := range strings.Lines(string(out)) {
		svc, status, _ := strings.Cut(strings.TrimSpace(line), " ")
		h[svc] = status
	}
	return h, nil
}

// healthChecked are the services with a health check: all of them but the
// one-shots (migrate, bootstrap, tls) and the demo.
var healthChecked = []string{"redis", "postgres", "nats", "replica1", "replica2", "replica3", "unsafe1", "unsafe2", "unsafe3", "nginx", "prometheus"}

func allHealthy(h map[string]string) bool {
	for _, svc := range healthChecked {
		if h[svc] != "healthy" {
			return false
		}
	}
	return true
}

// watchHealth polls the stack's health in the background from start; the
// function it returns stops the polling and says how long after start every
// service was first healthy (-1: never) and the first container appeared.
func watchHealth(ctx context.Context, start time.Time) func() (time.Duration, time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var took, appeared time.Duration = -1, -1
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			h, err := health(ctx)
			mu.Lock()
			if err == nil && len(h) > 0 && appeared < 0 {
				appeared = time.Since(start).Round(100 * time.Millisecond)
			}
			mu.Unlock()
			if err == nil && allHealthy(h) {
				mu.Lock()
				took = time.Since(start).Round(100 * time.Millisecond)
				mu.Unlock()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() (time.Duration, time.Duration) {
		// The caller returns once the stack is up (or the demo ended): give the
		// last poll a bounded moment, then stop.
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
		}
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return took, appeared
	}
}

// waitHealthy waits until every service is healthy, within limit.
func waitHealthy(ctx context.Context, t *testing.T, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last map[string]string
	for time.Now().Before(deadline) {
		h, err := health(ctx)
		if err == nil && allHealthy(h) {
			return
		}
		last = h
		if !sleep(ctx, 500*time.Millisecond) {
			t.Fatal(ctx.Err())
		}
	}
	t.Fatalf("not every service healthy within %s: %v", limit, last)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// The demo's rows: "strategy accepted stocked sold oversold req/s p95 p99" and
// "round stocked holds held sold expired resold released oversold", after
// compose's "demo-1  | " prefix; and its line per round of the events it read
// from the feed.
var (
	roundRow  = regexp.MustCompile(`^(unsafe|lock-batch)\s+(\d+)\s+(\d+)\s+(\d+)\s+(-?\d+)\s`)
	cartsRow  = regexp.MustCompile(`^carts\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(-?\d+)$`)
	eventsRow = regexp.MustCompile(`^events of the (unsafe|lock-batch|carts) round: (\d+) events \(`)
)

// checkDemoTables reads the demo's output: the control group oversold, the
// default strategy did not, the carts round did not and its audit agreed;
// each round's events were read from the feed, and the guarded rounds'
// rebuild their SKU's counters with no gap. It returns the orders the default
// round accepted and the events of the three rounds.
func checkDemoTables(t *testing.T, out string) (accepted, events int) {
	t.Helper()
	accepted = checkRoundTables(t, out)
	rounds, problems := demoEvents(out)
	for _, p := range problems {
		t.Error(p)
	}
	for _, n := range rounds {
		events += n
	}
	t.Logf("demo: events read from the feed: %v", rounds)
	return accepted, events
}

// demoEvents reads the demo's line per round of the events it read from the
// feed: how many of each round's, and what is wrong with them.
func demoEvents(out string) (map[string]int, []string) {
	rounds := map[string]int{}
	var problems []string
	for line := range strings.Lines(out) {
		if _, after, ok := strings.Cut(line, "| "); ok {
			line = after
		}
		line = strings.TrimSpace(line)
		m := eventsRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		rounds[m[1]] = n
		if m[1] != "unsafe" && (!strings.Contains(line, ", no gap; rebuilt from the events = the SKU's counters") ||
			strings.Contains(line, "had not caught up")) {
			problems = append(problems, fmt.Sprintf("the %s round's events do not rebuild its counters: %s", m[1], line))
		}
	}
	for _, r := range []string{"unsafe", "lock-batch", "carts"} {
		if rounds[r] == 0 {
			problems = append(problems, fmt.Sprintf("the demo read no events of the %s round from the feed", r))
		}
	}
	return rounds, problems
}

// checkRoundTables checks the demo's tables and returns the orders the
// default round accepted.
func checkRoundTables(t *testing.T, out string) int {
	t.Helper()
	oversold := map[string]int{}
	accepted := map[string]int{}
	carts := []int(nil)
	agrees := false
	for line := range strings.Lines(out) {
		if _, after, ok := strings.Cut(line, "| "); ok {
			line = after
		}
		line = strings.TrimSpace(line)
		if m := roundRow.FindStringSubmatch(line); m != nil {
			accepted[m[1]], _ = strconv.Atoi(m[2])
			oversold[m[1]], _ = strconv.Atoi(m[5])
		}
		if m := cartsRow.FindStringSubmatch(line); m != nil {
			carts = nil
			for _, f := range m[1:] {
				n, _ := strconv.Atoi(f)
				carts = append(carts, n)
			}
		}
		if strings.HasPrefix(line, "the carts round oversold nothing") && strings.Contains(line, "the audit agrees") {
			agrees = true
		}
	}
	if _, ok := oversold["unsafe"]; !ok {
		t.Fatal("the demo printed no unsafe row")
	}
	if _, ok := oversold["lock-batch"]; !ok {
		t.Fatal("the demo printed no lock-batch row")
	}
	if oversold["unsafe"] <= 0 {
		t.Errorf("the control group oversold %d units: it must oversell", oversold["unsafe"])
	}
	if oversold["lock-batch"] != 0 || accepted["lock-batch"] == 0 {
		t.Errorf("the default round: accepted %d, oversold %d; want some accepted and 0 oversold", accepted["lock-batch"], oversold["lock-batch"])
	}
	if carts == nil || carts[7] != 0 || !agrees {
		t.Errorf("the carts round: row %v, audit agrees %v; want 0 oversold and the audit agreeing", carts, agrees)
	}
	t.Logf("demo: unsafe oversold %d, lock-batch accepted %d and oversold 0, carts %v (stocked holds held sold expired resold released oversold)",
		oversold["unsafe"], accepted["lock-batch"], carts)
	return accepted["lock-batch"]
}

// streamMessages is the number of messages JetStream's stream of stock
// events (STOCKGUARD) holds, from the nats container's monitoring port
// (/jsz); 0 before a relay made the stream.
func streamMessages(ctx context.Context, dc func(...string) []string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := command(ctx, dc("exec", "-T", "nats", "wget", "-qO-", "http://127.0.0.1:8222/jsz?streams=true")...).Output()
	if err != nil {
		return 0, fmt.Errorf("GET /jsz in the nats container: %w", err)
	}
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string
				State struct{ Messages int64 }
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.Unmarshal(out, &jsz); err != nil {
		return 0, fmt.Errorf("/jsz: %w", err)
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name == "STOCKGUARD" {
				return s.State.Messages, nil
			}
		}
	}
	return 0, nil
}

// waitStreamHolds waits, for at most two minutes, until the stream holds at
// least want messages: the relay delivered what it was asked to, its backlog
// drained.
func waitStreamHolds(ctx context.Context, t *testing.T, dc func(...string) []string, want int64, what string) int64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var n int64
	var err error
	for {
		if n, err = streamMessages(ctx, dc); err == nil && n >= want {
			t.Logf("JetStream: the stream STOCKGUARD holds %d messages, at least %d (%s)", n, want, what)
			return n
		}
		if time.Now().After(deadline) {
			t.Errorf("JetStream: the stream STOCKGUARD holds %d messages (%v) two minutes on; want at least %d (%s)", n, err, want, what)
			return n
		}
		if !sleep(ctx, time.Second) {
			t.Fatal(ctx.Err())
		}
	}
}

func logImageSize(ctx context.Context, t *testing.T, image string) {
	t.Helper()
	size := strings.TrimSpace(output(ctx, t, "docker", "image", "inspect", "--format", "{{.Size}}", image))
	n, _ := strconv.ParseInt(size, 10, 64)
	t.Logf("image %s: %.1f MB", image, float64(n)/1e6)
}

// promQuery asks Prometheus's API for an instant vector.
func promQuery(ctx context.Context, q string) ([]struct {
	Metric map[string]string
	Value  [2]any
}, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string
		Data   struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: status %q", q, body.Status)
	}
	return body.Data.Result, nil
}

func value(v [2]any) float64 {
	s, _ := v[1].(string)
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// checkPrometheus: Prometheus scrapes all three replicas (up == 1, after the
// restart), and counted the orders the demo's default round placed (a counter
// restarts with its replica: the most it reached is what Prometheus kept).
func checkPrometheus(ctx context.Context, t *testing.T, accepted int) {
	t.Helper()
	var up, placed float64
	var last string
	for range 120 { // a minute: the scrape interval is 5s
		up, placed = 0, 0
		res, err := promQuery(ctx, `up{job="stockguard"}`)
		if err == nil {
			for _, r := range res {
				up += value(r.Value)
			}
		}
		res2, err2 := promQuery(ctx, `sum(max_over_time(stockguard_orders_placed_total[1h]))`)
		if err2 == nil && len(res2) == 1 {
			placed = value(res2[0].Value)
		}
		last = fmt.Sprintf("up %v (%v), placed %v (%v)", up, err, placed, err2)
		if up == 3 && placed >= float64(accepted) {
			t.Logf("Prometheus: 3 replicas up, %v orders counted (the default round accepted %d)", placed, accepted)
			return
		}
		if !sleep(ctx, 500*time.Millisecond) {
			t.Fatal(ctx.Err())
		}
	}
	t.Errorf("Prometheus: %s; want 3 replicas up and at least %d orders counted", last, accepted)
}

// checkNginxProblem: a route that does not exist, asked through nginx, is a
// problem+json 404.
func checkNginxProblem(ctx context.Context, t *testing.T) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nginxURL+"/v1/no-such-route", nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var p struct {
		Type   string
		Status int
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" || err != nil || p.Status != 404 {
		t.Errorf("GET /v1/no-such-route through nginx: %d %q %+v %v; want a problem+json 404", resp.StatusCode,
			resp.Header.Get("Content-Type"), p, err)
	}
}

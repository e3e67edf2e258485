package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/testenv"
)

// A replica whose Redis does not answer starts with a warning, says why it is
// not ready, refuses orders as 503 dependency-unavailable naming Redis (never
// "busy"), still refuses an unknown SKU as 422 (no lock needed), and logs every
// line, the libraries' too, as JSON with durations as text and the request id.
func TestRedisDownIsSaidSo(t *testing.T) {
	dbURL := testenv.NewDatabase(t, "postgres")
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	env := append(os.Environ(), "DATABASE_URL="+dbURL, "REDIS_URL=redis://"+closed+"/0", "STOCKGUARD_ADMIN_TOKEN="+adminToken,
		"STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOCK_WAIT=1s", "STOCKGUARD_LOG_FORMAT=json", "STOCKGUARD_LOG_LEVEL=info", testDBConns)
	mig := exec.CommandContext(t.Context(), binary, "migrate")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	db, err := gormstore.Open(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gormstore.New(db, time.Now, 10*time.Second).Restock(t.Context(), "D-1", 5, 1); err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	_ = sqlDB.Close()
	url, logPath := startReplicaLogged(t, 0, env)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	status, body, err := call(ctx, t, "GET", url+"/readyz", "", nil)
	var ready struct {
		Status       string `json:"status"`
		Dependencies []struct{ Name, State, Error string }
	}
	if err != nil || status != http.StatusServiceUnavailable || json.Unmarshal(body, &ready) != nil || ready.Status != "not ready" {
		t.Fatalf("/readyz with Redis down: %d %s %v", status, body, err)
	}
	states := map[string]string{}
	for _, d := range ready.Dependencies {
		states[d.Name] = d.State
	}
	if states["redis"] != "down" || states["database"] != "up" {
		t.Errorf("/readyz: %s, want redis down and database up", body)
	}

	order := `{"items":[{"sku":"D-1","quantity":1}]}`
	status, body, err = call(ctx, t, "POST", url+"/v1/orders", order, map[string]string{"X-Request-Id": "trace-77"})
	var p map[string]any
	if err != nil || status != http.StatusServiceUnavailable || json.Unmarshal(body, &p) != nil ||
		p["type"] != httpapi.ProblemBase+"dependency-unavailable" || p["dependency"] != "redis" || p["request_id"] != "trace-77" {
		t.Errorf("an order with Redis down: %d %s %v, want 503 dependency-unavailable naming redis", status, body, err)
	}
	status, body, err = call(ctx, t, "POST", url+"/v1/orders", `{"items":[{"sku":"NOPE-9","quantity":1}]}`, nil)
	if err != nil || status != http.StatusUnprocessableEntity || !strings.Contains(string(body), "unknown-sku") || !strings.Contains(string(body), "NOPE-9") {
		t.Errorf("an order for an unknown SKU with Redis down: %d %s %v, want 422 unknown-sku", status, body, err)
	}

	// The access line is written once the answer is sent: read until it is
	// there (or 10s went by).
	var log []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if log, err = os.ReadFile(logPath); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(log), `"route":"/v1/orders","status":422`) && strings.Contains(string(log), `"status":503,"latency"`) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a file, with a deadline
	}
	var warned, accessLogged, durationText bool
	lines := bufio.NewScanner(bytes.NewReader(log))
	for lines.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", lines.Text())
			continue
		}
		msg, _ := rec["msg"].(string)
		warned = warned || strings.Contains(msg, "redis does not answer")
		accessLogged = accessLogged || (msg == "request" && rec["route"] == "/v1/orders" && rec["request_id"] == "trace-77" && rec["status"] == 503.0)
		if msg == "serving" {
			_, durationText = rec["lock_ttl"].(string)
		}
	}
	if !warned || !accessLogged || !durationText {
		t.Errorf("log: warning at start %v, access line of the order with its request id %v, durations as text %v", warned, accessLogged, durationText)
	}
}

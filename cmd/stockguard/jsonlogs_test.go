package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/internal/topology"
)

// With --log-format json every line a replica writes is a JSON object, on
// stdout as on stderr, from its first line (the address, which a starter on
// port 0 reads with topology.ListenAddr) to its last (after a graceful stop),
// through requests that log warnings: docker compose logs fed to a JSON log
// collector parses all of it.
func TestJSONLogsEveryLine(t *testing.T) {
	dir := t.TempDir()
	redis := testenv.NewRedis(t)
	env := append(os.Environ(), "DATABASE_URL="+testenv.DefaultDatabase(t), "REDIS_URL="+redis.URL(),
		"STOCKGUARD_NAMESPACE="+redis.Namespace, "STOCKGUARD_ADMIN_TOKEN="+adminToken, "STOCKGUARD_ADDR=127.0.0.1:0",
		"STOCKGUARD_LOG_FORMAT=json", "STOCKGUARD_LOG_LEVEL=debug", testDBConns)
	stdoutPath, stderrPath := filepath.Join(dir, "stdout"), filepath.Join(dir, "stderr")
	stdoutFile, err := os.Create(stdoutPath)
	if err != nil {
		t.Fatal(err)
	}
	stderrFile, err := os.Create(stderrPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), binary, "serve")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdoutFile, stderrFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once Wait returned waitErr
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	// The address, read as a starter reads it, once the first line is whole.
	var url string
	for range 600 { // 60 s at most
		b, _ := os.ReadFile(stdoutPath)
		if line, _, ok := bytes.Cut(b, []byte("\n")); ok {
			addr, ok := topology.ListenAddr(string(line))
			if !ok {
				t.Fatalf("first line of stdout %q: not the address in JSON", line)
			}
			url = "http://" + addr
			break
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(stderrPath)
			t.Fatalf("the replica exited before listening: %v\n%s", waitErr, b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if url == "" {
		t.Fatal("no address on stdout within 60 s")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"POST", "/v1/orders", `{"items":[{"sku":"NOPE","quantity":1}]}`},
		{"POST", "/v1/orders", `{"items":`},
		{"POST", "/v1/skus/J-1/restock", `{"quantity":1}`}, // no admin token: a warning
		{"GET", "/v1/nowhere", ""},
	} {
		// Off the contract on purpose (bad bodies, no token, no route): a plain client.
		req, err := http.NewRequestWithContext(ctx, r.method, url+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", r.method, r.path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("graceful stop: %v", waitErr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the replica did not stop within 30 s of SIGTERM")
	}

	for _, path := range []string{stdoutPath, stderrPath} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		lines, n := bufio.NewScanner(f), 0
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			n++
			var rec map[string]any
			if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
				t.Errorf("%s line %d is not a JSON object: %q", filepath.Base(path), n, lines.Text())
			}
		}
		_ = f.Close()
		if n == 0 {
			t.Errorf("%s: no line at all", filepath.Base(path))
		}
	}
}

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/testenv"
)

// The topology of docker-compose.yml from processes: three replicas on the
// machine's Redis and PostgreSQL, nginx from the distribution with
// deploy/nginx.conf pointed at them, the load generator through nginx, the audit.
func TestComposeTopologyThroughNginx(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if testenv.RequireReal() {
			t.Fatal("nginx is not on the PATH")
		}
		t.Skip("nginx is not on the PATH")
	}
	c := startCluster(t, 3)
	url := startNginx(t, nginx, c.urls)
	code, s := runLoadtest(t, url)
	audit := s["audit"].(map[string]any)
	if code != 0 || s["oversold"].(float64) != 0 || audit["units_sold_client"] != audit["units_sold_server"] || audit["units_sold_client"].(float64) == 0 {
		t.Fatalf("through nginx: exit %d, oversold %v, audit %v", code, s["oversold"], audit)
	}
}

// startNginx runs nginx with deploy/nginx.conf, its upstreams and port rewritten
// to local ones, and returns its URL once it answers. edits, in order, change the
// rewritten text before nginx reads it.
func startNginx(t *testing.T, nginx string, replicas []string, edits ...func(string) string) string {
	t.Helper()
	conf, err := os.ReadFile("../../deploy/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	text := string(conf)
	for i, r := range replicas {
		text = strings.Replace(text, fmt.Sprintf("server replica%d:8080", i+1), "server "+strings.TrimPrefix(r, "http://"), 1)
	}
	if strings.Contains(text, "replica") && strings.Contains(text, ":8080 max_fails") {
		t.Fatalf("not every upstream was rewritten:\n%s", text)
	}
	text = strings.Replace(text, "listen 8080;", "listen "+addr+";", 1)
	head := fmt.Sprintf("pid %s/nginx.pid;\nerror_log %s/error.log warn;\n", dir, dir)
	if os.Geteuid() == 0 {
		head += "user root;\n" // the workers write under the test's private folder
	}
	temp := ""
	for _, k := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		temp += fmt.Sprintf("    %s_temp_path %s/%s;\n", k, dir, k)
	}
	text = head + strings.Replace(text, "http {\n", "http {\n"+temp, 1)
	for _, edit := range edits {
		text = edit(text)
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), nginx, "-p", dir, "-c", path, "-g", "daemon off;")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful stop
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx error log:\n%s", b)
		}
	})
	url := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/nginx-health", nil)
		resp, err := nginxOwn.Do(req) // nginx's own /nginx-health: no route of the contract
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not answer on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // nginx is starting: ask again
	}
}

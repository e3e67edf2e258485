package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestServeSettingsComeFromFlagsThenEnvironment(t *testing.T) {
	vars := env(map[string]string{"DATABASE_URL": "postgres://u:pw-x9q@db/x", "STOCKGUARD_ADMIN_TOKEN": "s3cr3t-x9",
		"STOCKGUARD_LOCK_TTL": "7s", "REDIS_URL": "redis://r:6379/0"})
	c, err := parseServe(nil, vars, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.databaseURL != "postgres://u:pw-x9q@db/x" || c.adminToken != "s3cr3t-x9" || c.lockTTL != 7*time.Second || c.redisURL != "redis://r:6379/0" {
		t.Fatalf("from the environment: %+v", c)
	}
	c, err = parseServe([]string{"--database-url", "sqlite:x.db", "--lock-ttl", "3s"}, vars, io.Discard)
	if err != nil || c.databaseURL != "sqlite:x.db" || c.lockTTL != 3*time.Second {
		t.Fatalf("flags over the environment: %+v %v", c, err)
	}
	var help bytes.Buffer
	_, _ = parseServe([]string{"--help"}, vars, &help)
	if strings.Contains(help.String(), "pw-x9q") || strings.Contains(help.String(), "s3cr3t-x9") {
		t.Fatalf("--help shows a secret:\n%s", help.String())
	}
}

func TestServeRefusesSettingsThatCannotWork(t *testing.T) {
	for _, args := range [][]string{
		{"--strategy", "fast"},
		{"--strategy", "unsafe"},
		{"--lock-wait", "0s"},
		{"--lock-replicas", "-1"},
		{"--lock-url", "ftp://locks:21"},
		{"--lock-url", "postgres://db/x", "--lock-replicas", "1"},
		{"--lock-url", "redis://%zz"},
		{"--read-header-timeout", "0s"},
		{"--read-timeout", "-1s"},
		{"--request-timeout", "30s", "--shutdown-timeout", "10s"},
		{"extra"},
	} {
		if _, err := parseServe(args, env(nil), io.Discard); err == nil {
			t.Errorf("%v was accepted", args)
		}
	}
	if _, err := parseServe(nil, env(map[string]string{"STOCKGUARD_LOCK_TTL": "soon"}), io.Discard); err == nil {
		t.Error("a malformed duration in the environment was accepted")
	}
}

// A lock-batch order taken into a batch just before its request's deadline waits
// for the batch's answer, which comes within the batch's own deadline: the
// server must not cut that answer off.
func TestWriteDeadlineCoversTheRequestAndTheBatch(t *testing.T) {
	for _, timeout := range []string{"1s", "10s", "45s"} {
		c, err := parseServe([]string{"--request-timeout", timeout, "--shutdown-timeout", "1m"}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		srv := newHTTPServer(c, http.NotFoundHandler(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if want := c.requestTimeout + c.batchTimeout(); srv.WriteTimeout <= want {
			t.Errorf("request timeout %s: write timeout %s, want over %s", timeout, srv.WriteTimeout, want)
		}
	}
}

package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
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
	c, err = parseServe(nil, env(map[string]string{"NATS_URL": "nats://u:pw-n4t@nats:4222", "STOCKGUARD_RELAY_INTERVAL": "250ms",
		"STOCKGUARD_EVENT_RETENTION": "72h"}), io.Discard)
	if err != nil || c.natsURL != "nats://u:pw-n4t@nats:4222" || c.relayInterval != 250*time.Millisecond || c.eventRetention != 72*time.Hour {
		t.Fatalf("the events' settings from the environment: %+v %v", c, err)
	}
	var help bytes.Buffer
	_, _ = parseServe([]string{"--help"}, env(map[string]string{"NATS_URL": "nats://u:pw-n4t@nats:4222"}), &help)
	_, _ = parseServe([]string{"--help"}, vars, &help)
	if strings.Contains(help.String(), "pw-x9q") || strings.Contains(help.String(), "s3cr3t-x9") || strings.Contains(help.String(), "pw-n4t") {
		t.Fatalf("--help shows a secret:\n%s", help.String())
	}
}

// TestWebhookGuardSettings: the allow-list and the disable-after come from
// their flags or variables; none allowed and 5 days by default; a list that
// does not parse is a startup error that names the flag.
func TestWebhookGuardSettings(t *testing.T) {
	c, err := parseServe(nil, env(nil), io.Discard)
	if err != nil || c.webhookAllowNetworks != "" || c.webhookDisableAfter != 120*time.Hour {
		t.Fatalf("defaults: %q %v %v", c.webhookAllowNetworks, c.webhookDisableAfter, err)
	}
	c, err = parseServe(nil, env(map[string]string{"STOCKGUARD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8, ::1/128",
		"STOCKGUARD_WEBHOOK_DISABLE_AFTER": "36h"}), io.Discard)
	if err != nil || c.webhookDisableAfter != 36*time.Hour {
		t.Fatalf("from the environment: %+v %v", c, err)
	}
	g, err := newWebhookGuard(c.webhookAllowNetworks)
	if err != nil || len(g.Allowed()) != 2 || g.CheckURL(t.Context(), "http://127.0.0.1:8080/") != nil || g.CheckURL(t.Context(), "http://[::1]/") != nil ||
		g.CheckURL(t.Context(), "http://10.0.0.1/") == nil {
		t.Fatalf("the guard of %q: %v", c.webhookAllowNetworks, err)
	}
	if _, err := parseServe([]string{"--webhook-allow-networks", "10.0.0.0/8,bad"}, env(nil), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "webhook-allow-networks") {
		t.Fatalf("a bad network: %v", err)
	}
	if _, err := parseServe(nil, env(map[string]string{"STOCKGUARD_WEBHOOK_ALLOW_NETWORKS": "300.0.0.0/8"}), io.Discard); err == nil {
		t.Fatal("a bad network from the environment was accepted")
	}
}

// TestAllocationSetting: --allocation is priority by default, and comes
// from its flag, then its variable, parsed into the config; a value that
// is no strategy is refused with the flags, or named with its variable.
func TestAllocationSetting(t *testing.T) {
	c, err := parseServe(nil, env(nil), io.Discard)
	if err != nil || c.Allocation != orders.AllocatePriority {
		t.Fatalf("default: %q %v", c.Allocation, err)
	}
	vars := env(map[string]string{"STOCKGUARD_ALLOCATION": "most-available"})
	if c, err = parseServe(nil, vars, io.Discard); err != nil || c.Allocation != orders.AllocateMostAvailable {
		t.Fatalf("from the environment: %q %v", c.Allocation, err)
	}
	if c, err = parseServe([]string{"--allocation", "priority"}, vars, io.Discard); err != nil || c.Allocation != orders.AllocatePriority {
		t.Fatalf("the flag over the environment: %q %v", c.Allocation, err)
	}
	if _, err := parseServe([]string{"--allocation", "nearest"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "allocation") {
		t.Errorf("--allocation nearest: %v", err)
	}
	if _, err := parseServe(nil, env(map[string]string{"STOCKGUARD_ALLOCATION": "Priority"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), "$STOCKGUARD_ALLOCATION") {
		t.Errorf("$STOCKGUARD_ALLOCATION=Priority: %v", err)
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
		{"--relay-interval", "0s"},
		{"--event-retention", "-1h"},
		{"--webhook-allow-networks", "127.0.0.1"},
		{"--webhook-allow-networks", "127.0.0.0/8,10.0.0.0/33"},
		{"--webhook-allow-networks", "compose"},
		{"--webhook-disable-after", "0s"},
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
		c, err := parseServe([]string{"--request-timeout", timeout, "--lock-wait", "500ms", "--shutdown-timeout", "1m"}, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		srv := newHTTPServer(c, http.NotFoundHandler(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if want := c.requestTimeout + c.batchTimeout(); srv.WriteTimeout <= want {
			t.Errorf("request timeout %s: write timeout %s, want over %s", timeout, srv.WriteTimeout, want)
		}
	}
}

// Settings that contradict each other, and URLs that cannot be used, are
// refused at start by name, before anything is opened: a bad Redis URL leaves
// the database untouched.
func TestServeRefusesByNameBeforeOpeningAnything(t *testing.T) {
	for _, c := range []struct {
		args  []string
		names []string
	}{
		{[]string{"--lock-wait", "1h"}, []string{"lock-wait", "request-timeout"}},
		{[]string{"--lock-wait", "10s"}, []string{"lock-wait", "request-timeout"}}, // equal is as bad
		{[]string{"--redis-url", "redis://h/not-a-db"}, []string{"redis-url"}},
		{[]string{"--redis-url", "redis://%zz"}, []string{"redis-url"}},
		{[]string{"--database-url", "ftp://db/x"}, []string{"database-url"}},
	} {
		_, err := parseServe(c.args, env(nil), io.Discard)
		for _, name := range c.names {
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%v: %v, want a refusal naming %s", c.args, err, name)
			}
		}
	}
	if _, err := parseServe([]string{"--lock-wait", "9s"}, env(nil), io.Discard); err != nil {
		t.Errorf("a lock wait under the request timeout: %v", err)
	}

	db := filepath.Join(t.TempDir(), "untouched.db")
	err := run(t.Context(), []string{"serve", "--addr", "127.0.0.1:0"}, env(map[string]string{"DATABASE_URL": "sqlite:" + db, "REDIS_URL": "redis://h:6379/x"}),
		io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "redis-url") {
		t.Fatalf("serve with a bad REDIS_URL: %v", err)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the database was opened before the bad REDIS_URL was refused (stat: %v)", err)
	}
}

func TestVersion(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), []string{"version"}, env(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if v := out.String(); !strings.HasPrefix(v, "stockguard ") || !strings.Contains(v, runtime.Version()) {
		t.Errorf("version %q: want stockguard, the module version and %s", v, runtime.Version())
	}
}

package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// runLoadtest drives a cluster with the load generator (over HTTP only, as any
// deployment would be) and returns its exit code and JSON summary.
func runLoadtest(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	return runLoadtestArgs(t, "-url", url, "-vus", "32", "-duration", "3s", "-skus", "3", "-stock", "30",
		"-multi", "0.3", "-retry", "0.2", "-threshold", "oversold:count==0")
}

func runLoadtestArgs(t *testing.T, args ...string) (int, map[string]any) {
	t.Helper()
	summary := filepath.Join(t.TempDir(), "summary.json")
	args = append(args, "-admin-token", adminToken, "-summary-json", summary, "-quiet")
	cmd := exec.CommandContext(t.Context(), loadtestBinary, args...)
	out, err := cmd.CombinedOutput()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("loadtest: %v\n%s", err, out)
	}
	b, rerr := os.ReadFile(summary)
	if rerr != nil {
		t.Fatalf("no summary: %v\n%s", rerr, out)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("loadtest exit %d:\n%s", code, out)
	return code, s
}

func TestLoadtestAuditPassesOnLock(t *testing.T) {
	code, s := runLoadtestArgs(t, "-url", startCluster(t, 3).urls[0], "-vus", "32", "-duration", "3s", "-skus", "3", "-stock", "30",
		"-multi", "0.3", "-retry", "0.2", "-threshold", "oversold:count==0", "-audit-events")
	audit := s["audit"].(map[string]any)
	if code != 0 || s["oversold"].(float64) != 0 || audit["units_sold_client"] != audit["units_sold_server"] {
		t.Fatalf("exit %d, summary oversold %v, audit %v", code, s["oversold"], audit)
	}
	// The stock events' feed tells every SKU's counters (the audit's -audit-events).
	if ev, ok := audit["events"].(map[string]any); !ok || ev["told"] != true || ev["events_run_skus"].(float64) == 0 {
		t.Fatalf("the events audit: %v", audit["events"])
	}
	if audit["units_sold_client"].(float64) == 0 {
		t.Fatal("nothing was sold: the run proves nothing")
	}
}

func TestLoadtestAuditCatchesUnsafe(t *testing.T) {
	code, s := runLoadtest(t, startCluster(t, 3, "STOCKGUARD_STRATEGY=unsafe", "STOCKGUARD_ALLOW_OVERSELL=true").urls[0])
	if code != 99 || s["oversold"].(float64) == 0 {
		t.Fatalf("exit %d and oversold %v against the unsafe strategy; want 99 (thresholds failed) and > 0", code, s["oversold"])
	}
}

// TestLoadtestCheckoutAuditPasses runs the checkout workload (holds confirmed,
// partly confirmed, released and abandoned to expire) against three replicas
// and its audit at the end: every unit held is sold, or back in available once
// the abandoned holds expired and the sweeper returned them.
func TestLoadtestCheckoutAuditPasses(t *testing.T) {
	c := startCluster(t, 3)
	cfg := filepath.Join(t.TempDir(), "checkout.yaml")
	scenario := "baseURL: " + c.urls[0] + `
scenarios:
  checkout:
    executor: constant-vus
    vus: 16
    duration: 3s
    workload:
      skus: 3
      stock: 60
      maxQuantity: 2
      multiSKU: 0.3
      retry: 0.2
      abandonFirst: 0.3
      checkout: {holdTTL: 2s, thinkTime: 300ms, confirm: 0.5, release: 0.25, partialConfirm: 0.3}
thresholds:
  oversold: ["count==0"]
  units_lost: ["count==0"]
  units_sold_twice: ["count==0"]
`
	if err := os.WriteFile(cfg, []byte(scenario), 0o600); err != nil {
		t.Fatal(err)
	}
	code, s := runLoadtestArgs(t, "-config", cfg)
	audit := s["audit"].(map[string]any)
	holds, _ := audit["holds"].(map[string]any)
	if code != 0 || holds == nil || s["oversold"].(float64) != 0 || s["units_lost"].(float64) != 0 ||
		s["units_sold_twice"].(float64) != 0 || audit["units_reserved"].(float64) != 0 || s["audit_failed"] != false {
		t.Fatalf("exit %d, audit %v", code, audit)
	}
	for _, k := range []string{"holds_confirmed", "holds_released", "holds_expired"} {
		if holds[k].(float64) == 0 {
			t.Errorf("%s: 0; the run proves less than it should (holds %v)", k, holds)
		}
	}
	if holds["units_held"] != holds["units_confirmed"].(float64)+holds["units_released"].(float64)+holds["units_expired"].(float64) ||
		audit["units_sold_server"] != holds["units_confirmed"] {
		t.Fatalf("units do not add up: %v", audit)
	}
}

// TestLoadtestAuditPassesWithLocations runs the load generator with its
// stock in three locations (issue 41): lines named, unsplit and allocated,
// split where the default is short; its audit reads every SKU's counts per
// location and GET /v1/audit. The load generator makes its locations with
// POST /v1/locations.
func TestLoadtestAuditPassesWithLocations(t *testing.T) {
	c := startCluster(t, 3)
	code, s := runLoadtestArgs(t, "-url", c.urls[0], "-vus", "32", "-duration", "3s", "-skus", "6", "-stock", "60", "-max-quantity", "3",
		"-multi", "0.3", "-retry", "0.2", "-locations", "3", "-named", "0.3", "-unsplit", "0.2", "-threshold", "oversold:count==0")
	audit := s["audit"].(map[string]any)
	locs, _ := audit["locations"].(map[string]any)
	if code != 0 || s["oversold"].(float64) != 0 || audit["server_consistent"] != true || locs == nil ||
		locs["service_audit"] != true || locs["problems"] != nil || locs["location_rows"].(float64) != 18 {
		t.Fatalf("exit %d, audit %v", code, audit)
	}
	checks := s["checks_by_name"].(map[string]any)
	alloc, _ := checks["order: allocations as the lines asked (a named line from its location, an unsplit one from one)"].(map[string]any)
	if alloc == nil || alloc["passes"].(float64) == 0 || alloc["fails"].(float64) != 0 || audit["units_sold_client"] != audit["units_sold_server"] {
		t.Fatalf("allocations checked %v; sold %v by clients, %v by the service", alloc, audit["units_sold_client"], audit["units_sold_server"])
	}
	t.Logf("lines split: %v", s["lines_split"])
}

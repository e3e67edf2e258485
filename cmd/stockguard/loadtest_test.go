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
	summary := filepath.Join(t.TempDir(), "summary.json")
	cmd := exec.CommandContext(t.Context(), loadtestBinary, "-url", url, "-admin-token", adminToken,
		"-vus", "32", "-duration", "3s", "-skus", "3", "-stock", "30", "-multi", "0.3", "-retry", "0.2",
		"-threshold", "oversold:count==0", "-summary-json", summary, "-quiet")
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
	code, s := runLoadtest(t, startCluster(t, 3).urls[0])
	audit := s["audit"].(map[string]any)
	if code != 0 || s["oversold"].(float64) != 0 || audit["units_sold_client"] != audit["units_sold_server"] {
		t.Fatalf("exit %d, summary oversold %v, audit %v", code, s["oversold"], audit)
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

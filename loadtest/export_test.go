package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// k6Shape is k6's --summary-export file as tools made for k6 read it.
type k6Shape struct {
	RootGroup struct {
		Name   string                     `json:"name"`
		Path   string                     `json:"path"`
		ID     string                     `json:"id"`
		Groups map[string]json.RawMessage `json:"groups"`
		Checks map[string]struct {
			Name   string `json:"name"`
			Path   string `json:"path"`
			ID     string `json:"id"`
			Passes int64  `json:"passes"`
			Fails  int64  `json:"fails"`
		} `json:"checks"`
	} `json:"root_group"`
	Metrics struct {
		Duration struct {
			Avg        float64         `json:"avg"`
			Min        float64         `json:"min"`
			Med        float64         `json:"med"`
			Max        float64         `json:"max"`
			P90        float64         `json:"p(90)"`
			P95        float64         `json:"p(95)"`
			P99        float64         `json:"p(99)"`
			Thresholds map[string]bool `json:"thresholds"`
		} `json:"http_req_duration"`
		Reqs struct {
			Count      int64           `json:"count"`
			Rate       float64         `json:"rate"`
			Thresholds map[string]bool `json:"thresholds"`
		} `json:"http_reqs"`
		Checks struct {
			Passes int64   `json:"passes"`
			Fails  int64   `json:"fails"`
			Value  float64 `json:"value"`
		} `json:"checks"`
		Failed struct {
			Passes int64   `json:"passes"`
			Fails  int64   `json:"fails"`
			Value  float64 `json:"value"`
		} `json:"http_req_failed"`
		VUs struct {
			Value, Min, Max float64
		} `json:"vus"`
		VUsMax struct {
			Value, Min, Max float64
		} `json:"vus_max"`
		Oversold struct {
			Count      int64           `json:"count"`
			Thresholds map[string]bool `json:"thresholds"`
		} `json:"oversold"`
	} `json:"metrics"`
	Stockguard struct {
		Reqs     int64 `json:"http_reqs"`
		Oversold int64 `json:"oversold"`
		Audit    struct {
			ClientSold int64 `json:"units_sold_client"`
			ServerSold int64 `json:"units_sold_server"`
		} `json:"audit"`
		ByName map[string]checkCount `json:"checks_by_name"`
	} `json:"stockguard"`
}

func noEnv(string) string { return "" }

func TestSummaryExportHasK6Shape(t *testing.T) {
	srv := httptest.NewServer(newFakeShop())
	defer srv.Close()
	dir := t.TempDir()
	export, own := filepath.Join(dir, "export.json"), filepath.Join(dir, "own.json")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-url", srv.URL, "-vus", "4", "-duration", "300ms", "-stock", "50", "-retry", "0.3",
		"-threshold", "http_req_duration:p(95)<10s", "-threshold", "http_reqs:count>100000000", "-threshold", "oversold:count==0",
		"-summary-export", export, "-summary-json", own, "-quiet"}, noEnv, &stdout, &stderr)
	if !errors.Is(err, errThresholds) { // http_reqs count>100000000 fails, on purpose
		t.Fatalf("run: %v, want the thresholds failed\n%s%s", err, stdout.String(), stderr.String())
	}
	raw, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	var k k6Shape
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&k); err != nil {
		t.Fatal(err)
	}
	m := k.Metrics
	if m.Reqs.Count == 0 || m.Reqs.Count != k.Stockguard.Reqs || m.Reqs.Rate <= 0 {
		t.Fatalf("http_reqs %+v, stockguard's %d", m.Reqs, k.Stockguard.Reqs)
	}
	d := m.Duration
	if d.Min <= 0 || d.Min > d.Med || d.Med > d.P90 || d.P90 > d.P95 || d.P95 > d.P99 || d.P99 > d.Max || d.Avg < d.Min || d.Avg > d.Max {
		t.Fatalf("http_req_duration %+v: not ordered, or not in ms", d)
	}
	// k6 writes whether each threshold failed.
	if !maps.Equal(d.Thresholds, map[string]bool{"p(95)<10s": false}) || !maps.Equal(m.Reqs.Thresholds, map[string]bool{"count>100000000": true}) ||
		!maps.Equal(m.Oversold.Thresholds, map[string]bool{"count==0": false}) || m.Oversold.Count != 0 {
		t.Fatalf("thresholds: duration %v, http_reqs %v, oversold %v (count %d)", d.Thresholds, m.Reqs.Thresholds, m.Oversold.Thresholds, m.Oversold.Count)
	}
	rg := k.RootGroup
	if rg.Name != "" || rg.Path != "" || rg.ID != "d41d8cd98f00b204e9800998ecf8427e" || rg.Groups == nil || len(rg.Checks) == 0 {
		t.Fatalf("root_group %+v", rg)
	}
	var passes, fails int64
	for name, c := range rg.Checks {
		want := k.Stockguard.ByName[name]
		if c.Name != name || c.Path != "::"+name || c.ID != k6ID("::"+name) || c.Passes != want.Passes || c.Fails != want.Fails {
			t.Errorf("check %q: %+v, stockguard's %+v", name, c, want)
		}
		passes, fails = passes+c.Passes, fails+c.Fails
	}
	for _, name := range []string{chkOrder, chkAuditAgree, chkAuditOversold} {
		if c, ok := rg.Checks[name]; !ok || c.Passes == 0 {
			t.Errorf("check %q: %+v, want passes", name, c)
		}
	}
	if m.Checks.Passes != passes || m.Checks.Fails != fails || m.Checks.Value != ratio(passes, passes+fails) {
		t.Fatalf("checks %+v; the named checks add up to %d passes, %d fails", m.Checks, passes, fails)
	}
	if m.Failed.Passes+m.Failed.Fails != m.Reqs.Count || m.VUsMax.Max != 4 || m.VUs.Max != 4 || m.VUs.Min > m.VUs.Value {
		t.Fatalf("http_req_failed %+v of %d requests, vus %+v, vus_max %+v", m.Failed, m.Reqs.Count, m.VUs, m.VUsMax)
	}
	// stockguard's extras, and the same figures -summary-json wrote.
	a := k.Stockguard.Audit
	if a.ClientSold == 0 || a.ClientSold != a.ServerSold || k.Stockguard.Oversold != 0 {
		t.Fatalf("stockguard: %+v", k.Stockguard)
	}
	var ownSum, exported map[string]any
	ownRaw, err := os.ReadFile(own)
	if err != nil {
		t.Fatal(err)
	}
	var whole map[string]json.RawMessage
	if json.Unmarshal(ownRaw, &ownSum) != nil || json.Unmarshal(raw, &whole) != nil || json.Unmarshal(whole["stockguard"], &exported) != nil {
		t.Fatal("unreadable summaries")
	}
	if !slices.Equal(slices.Sorted(maps.Keys(ownSum)), slices.Sorted(maps.Keys(exported))) {
		t.Fatalf("-summary-json has %v, the export's stockguard %v", slices.Sorted(maps.Keys(ownSum)), slices.Sorted(maps.Keys(exported)))
	}
}

// k6Script is a tiny k6 run with what the comparison needs: named checks, one
// failing, and thresholds on a trend, a counter, a rate and checks. It runs 3s:
// k6 samples vus and vus_max once a second, and a 1s run on a busy machine
// could end before the first sample (CI saw it).
const k6Script = `import http from 'k6/http';
import { check, sleep } from 'k6';
export const options = {
  vus: 2, duration: '3s',
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  thresholds: { http_req_duration: ['p(95)<10000'], http_reqs: ['count>0'], http_req_failed: ['rate<0.5'], checks: ['rate>0.1'] },
};
export default function () {
  const r = http.get(__ENV.URL);
  check(r, { 'status is 200': (x) => x.status === 200, 'never': (x) => x.status === 599 });
  sleep(0.05);
}
`

// TestSummaryExportKeysMatchK6 compares the export's keys with a real k6
// export: the top level, the root group, a check, and every metric both have.
func TestSummaryExportKeysMatchK6(t *testing.T) {
	k6, why := findK6()
	if k6 == "" {
		skipOrFail(t, "TestSummaryExportKeysMatchK6 skipped: "+why)
	}
	dir := t.TempDir()
	hello := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer hello.Close()
	script, theirs := filepath.Join(dir, "tiny.js"), filepath.Join(dir, "k6.json")
	if err := os.WriteFile(script, []byte(k6Script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k6, "run", "--quiet", "--no-usage-report", "--summary-export", theirs, "-e", "URL="+hello.URL, script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("k6: %v\n%s", err, out)
	}

	srv := httptest.NewServer(newFakeShop())
	defer srv.Close()
	ours := filepath.Join(dir, "ours.json")
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-url", srv.URL, "-vus", "2", "-duration", "300ms", "-stock", "50",
		"-threshold", "http_req_duration:p(95)<10s", "-threshold", "http_reqs:count>0", "-threshold", "http_req_failed:rate<0.5",
		"-threshold", "checks:rate>0.1", "-summary-export", ours, "-quiet"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	type doc = map[string]any
	read := func(path string) doc {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	k6d, ltd := read(theirs), read(ours)
	keys := func(v any) []string { return slices.Sorted(maps.Keys(v.(doc))) }
	for _, k := range keys(k6d) {
		if _, ok := ltd[k]; !ok {
			t.Errorf("k6's export has %q at the top, ours does not (ours: %v)", k, keys(ltd))
		}
	}
	same := func(what string, theirs, ours any) {
		if a, b := keys(theirs), keys(ours); !slices.Equal(a, b) {
			t.Errorf("%s: k6 has keys %v, ours %v", what, a, b)
		}
	}
	same("root_group", k6d["root_group"], ltd["root_group"])
	k6Checks, ltChecks := k6d["root_group"].(doc)["checks"].(doc), ltd["root_group"].(doc)["checks"].(doc)
	same("a check", k6Checks["status is 200"], ltChecks[chkOrder])
	k6m, ltm := k6d["metrics"].(doc), ltd["metrics"].(doc)
	compared := 0
	for _, name := range keys(k6m) {
		if _, ok := ltm[name]; ok {
			same("metric "+name, k6m[name], ltm[name])
			compared++
		}
	}
	// The built-in metrics loadtest measures must all be there.
	for _, name := range []string{"checks", "data_received", "data_sent", "http_req_duration", "http_req_failed", "http_reqs",
		"iteration_duration", "iterations", "vus", "vus_max"} {
		if _, ok := k6m[name]; !ok {
			t.Errorf("k6's export has no %q: the comparison is not what it was", name)
		}
		if _, ok := ltm[name]; !ok {
			t.Errorf("our export has no %q", name)
		}
	}
	if !strings.Contains(stdout.String(), "✓ "+chkOrder) || compared < 10 {
		t.Fatalf("compared %d metrics; summary:\n%s", compared, stdout.String())
	}
}

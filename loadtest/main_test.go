package main

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// A closed port: nothing answers, and the error says so rather than report a
// status 0 and blame the prefix.
func TestNothingAnswersAtAClosedPort(t *testing.T) {
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	_ = l.Close()
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"-url", url, "-duration", "200ms", "-quiet"}, noEnv, &stdout, &stderr)
	var na *noAnswerError
	if !errors.As(err, &na) || !strings.HasPrefix(err.Error(), "nothing answers at "+url+": ") ||
		!strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "status") {
		t.Fatalf("got %v, want nothing answers at %s: ...connection refused", err, url)
	}
	if strings.Count(err.Error(), "nothing answers") != 1 {
		t.Fatalf("said more than once: %v", err)
	}
	// A name that does not resolve (.invalid never does) is the same case.
	err = run(t.Context(), []string{"-url", "http://stockguard.invalid:8080", "-duration", "200ms", "-quiet"}, noEnv, &stdout, &stderr)
	if !errors.As(err, &na) || !strings.HasPrefix(err.Error(), "nothing answers at http://stockguard.invalid:8080: ") {
		t.Fatalf("got %v, want nothing answers at http://stockguard.invalid:8080: ...", err)
	}
}

// An answer is not "nothing answers": a status other than 404 is named as one.
func TestSetupNamesAStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-url", srv.URL, "-duration", "200ms", "-prefix", "p", "-quiet"}, noEnv, &stdout, &stderr)
	var na *noAnswerError
	if err == nil || errors.As(err, &na) || !strings.Contains(err.Error(), "SKU p-0 cannot be read: status 503") {
		t.Fatalf("got %v, want SKU p-0 cannot be read: status 503", err)
	}
}

func TestPrefixNamesTheSKUs(t *testing.T) {
	shop := newFakeShop()
	srv := httptest.NewServer(shop)
	defer srv.Close()
	for _, tc := range []struct {
		args   []string
		env    string
		prefix string
	}{
		{[]string{"-prefix", "mine"}, "", "mine"},
		{nil, "fromenv", "fromenv"},
		{[]string{"-prefix", "flag"}, "notthis", "flag"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"-url", srv.URL, "-vus", "2", "-duration", "200ms", "-skus", "2", "-quiet"}, tc.args...)
		getenv := func(k string) string {
			if k == "LOADTEST_PREFIX" {
				return tc.env
			}
			return ""
		}
		if err := run(t.Context(), args, getenv, &stdout, &stderr); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, stderr.String())
		}
		shop.mu.Lock()
		_, ok0 := shop.skus[tc.prefix+"-0"]
		_, ok1 := shop.skus[tc.prefix+"-1"]
		shop.mu.Unlock()
		if !ok0 || !ok1 {
			t.Fatalf("%v, $LOADTEST_PREFIX=%q: no SKUs %s-0 and %s-1", tc.args, tc.env, tc.prefix, tc.prefix)
		}
	}

	// Run again with a prefix used: refused before any load, naming the flag.
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-url", srv.URL, "-duration", "200ms", "-prefix", "mine", "-quiet"}, noEnv, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "SKU mine-0 exists already") || !strings.Contains(err.Error(), "-prefix") {
		t.Fatalf("got %v, want SKU mine-0 exists already, naming -prefix", err)
	}
	if err := run(t.Context(), []string{"-url", srv.URL, "-prefix", "no spaces", "-quiet"}, noEnv, &stdout, &stderr); err == nil ||
		!strings.Contains(err.Error(), `prefix "no spaces"`) {
		t.Fatalf("a prefix with a space: %v, want refused", err)
	}
}

func TestAssignPrefixes(t *testing.T) {
	sc := map[string]Scenario{"b": {}, "a": {}, "own": {Workload: Workload{Prefix: "kept"}}}
	assignPrefixes(sc, "x", "run1")
	if sc["a"].Workload.Prefix != "x-0" || sc["b"].Workload.Prefix != "x-1" || sc["own"].Workload.Prefix != "kept" {
		t.Fatalf("got %+v", sc)
	}
	one := map[string]Scenario{"default": {}}
	assignPrefixes(one, "", "run1")
	if one["default"].Workload.Prefix != "lt-run1" {
		t.Fatalf("got %q, want lt-run1", one["default"].Workload.Prefix)
	}
}

// Every figure of a threshold line has its unit: durations ms or s, a rate
// metric %, a counter's rate /s, data B, kB or MB; counts none.
func TestThresholdLinesHaveUnits(t *testing.T) {
	s := sampleSummary()
	s.BytesOut, s.MaxVUs = 2_500_000, 8
	cfg := Config{Thresholds: map[string][]string{
		"http_req_duration":  {"p(95)<200ms", "avg<1s"},
		"iteration_duration": {"max<1m"},
		"http_req_failed":    {"rate<0.5"},
		"checks":             {"rate>0.9"},
		"http_reqs":          {"count>10", "rate>1"},
		"data_sent":          {"count>0", "rate>0"},
		"oversold":           {"count==0"},
		"vus":                {"value<100"},
	}}
	s.judge(cfg)
	var text bytes.Buffer
	s.WriteText(&text)
	want := map[string]*regexp.Regexp{
		"http_req_duration p(95)<200ms": regexp.MustCompile(`\(actual [0-9.]+ms\)$`),
		"http_req_duration avg<1s":      regexp.MustCompile(`\(actual [0-9.]+ms\)$`),
		"iteration_duration max<1m":     regexp.MustCompile(`\(actual [0-9.]+µs\)$`), // nothing recorded: 0µs
		"http_req_failed rate<0.5":      regexp.MustCompile(`\(actual 1\.00%\)$`),
		"checks rate>0.9":               regexp.MustCompile(`\(actual 99\.83%\)$`),
		"http_reqs count>10":            regexp.MustCompile(`\(actual 300\)$`),
		"http_reqs rate>1":              regexp.MustCompile(`\(actual 100\.00/s\)$`),
		"data_sent count>0":             regexp.MustCompile(`\(actual 2\.5 MB\)$`),
		"data_sent rate>0":              regexp.MustCompile(`\(actual 833\.3 kB/s\)$`),
		"oversold count==0":             regexp.MustCompile(`\(actual 0\)$`),
		"vus value<100":                 regexp.MustCompile(`\(actual 8\)$`),
	}
	found := 0
	for _, line := range strings.Split(text.String(), "\n") {
		for key, re := range want {
			if strings.HasSuffix(strings.SplitN(line, " (actual", 2)[0], key) {
				found++
				if !re.MatchString(line) {
					t.Errorf("%q: want it to match %s", line, re)
				}
			}
		}
	}
	if found != len(want) {
		t.Fatalf("found %d of %d threshold lines:\n%s", found, len(want), text.String())
	}
}

// Checks are listed by name with their passes and fails, in the text and in
// the JSON summary.
func TestChecksByName(t *testing.T) {
	s := sampleSummary()
	s.Named = map[string]checkCount{chkOrder: {Passes: 290, Fails: 0}, chkProblem: {Passes: 247, Fails: 3}}
	var text bytes.Buffer
	s.WriteText(&text)
	for _, want := range []string{
		"✓ " + chkOrder + "\n      ↳  100% — ✓ 290 / ✗ 0\n",
		"✗ " + chkProblem + "\n      ↳  99% — ✓ 247 / ✗ 3\n",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("no %q in\n%s", want, text.String())
		}
	}
	byName := s.ownJSON()["checks_by_name"].(map[string]checkCount)
	if byName[chkProblem] != (checkCount{Passes: 247, Fails: 3}) {
		t.Fatalf("checks_by_name %v", byName)
	}
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"-version"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	if !strings.HasPrefix(out, "loadtest ") || !strings.HasSuffix(out, "built with "+runtime.Version()+"\n") {
		t.Fatalf("-version printed %q", out)
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	if got, want := versionLine(bi), "loadtest v1.2.3, revision abc123, committed 2026-01-02T03:04:05Z, modified, built with go1.99"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	bi.Main.Version, bi.Settings = "", bi.Settings[:1]
	if got, want := versionLine(bi), "loadtest (devel), revision abc123, built with go1.99"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

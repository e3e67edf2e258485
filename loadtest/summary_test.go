package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleSummary() *Summary {
	s := &Summary{Duration: 3 * time.Second, reqDur: newHist(), iterDur: newHist(), Reqs: 300, Failed: 3,
		Checks: 600, ChecksFail: 1, Iterations: 290, Accepted: 40, Refused: 250,
		Audit: Audit{Stocked: 100, ClientSold: 100, ServerSold: 100, Consistent: true, ServerAudit: true}}
	for i := range 300 {
		_ = s.reqDur.RecordValue(int64(1000 + i*10))
	}
	for i := range 3 {
		s.Timeline = append(s.Timeline, Point{Second: i, Reqs: 100, Failed: int64(i), P50: 2, P95: 4, P99: 5})
	}
	return s
}

func TestSummaryOutputs(t *testing.T) {
	s := sampleSummary()
	var text bytes.Buffer
	s.WriteText(&text)
	for _, want := range []string{"http_req_duration", "p(95)=", "http_req_failed", "checks", "oversold", "units_sold", "dropped_iterations"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the summary has no %q:\n%s", want, text.String())
		}
	}
	dir := t.TempDir()
	if err := s.WriteJSON(filepath.Join(dir, "s.json")); err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "s.json"))
	if err := json.Unmarshal(b, &j); err != nil || j["oversold"] != float64(0) || j["http_reqs"] != float64(300) || len(j["timeline"].([]any)) != 3 {
		t.Fatalf("JSON summary %v (%v)", j, err)
	}
	if err := s.WriteChart(filepath.Join(dir, "c.html"), "run"); err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "c.html"))
	if strings.Count(string(html), "<svg") != 2 || strings.Count(string(html), "<polyline") != 5 || strings.Contains(string(html), "<script") {
		t.Fatalf("the chart is not two self-contained plots of 2 and 3 lines:\n%s", html)
	}
}

func TestTimelineLeavesOutTheLastPartSecond(t *testing.T) {
	// 100 requests in each of 3 whole seconds, then 10 in the 0.2s before the
	// run ended: that last second would chart as 10 req/s.
	rec := newRecorder()
	sh := &rec.shards[0]
	for sec := range 3 {
		for i := range 100 {
			rec.request(sh, kindOther, rec.start.Add(time.Duration(sec)*time.Second+time.Duration(i)*time.Millisecond), time.Millisecond, false)
		}
	}
	for i := range 10 {
		rec.request(sh, kindOther, rec.start.Add(3*time.Second+time.Duration(i)*10*time.Millisecond), time.Millisecond, false)
	}
	s := summarize(3200*time.Millisecond, nil, &live{}, rec, nil)
	if len(s.Timeline) != 3 {
		t.Fatalf("%d seconds in the timeline of a 3.2s run, want its 3 whole ones: %+v", len(s.Timeline), s.Timeline)
	}
	for _, p := range s.Timeline {
		if p.Reqs != 100 {
			t.Errorf("second %d: %d requests, want 100", p.Second, p.Reqs)
		}
	}
	path := filepath.Join(t.TempDir(), "c.html")
	if err := s.WriteChart(path, "run"); err != nil {
		t.Fatal(err)
	}
	html, _ := os.ReadFile(path)
	// The throughput's first polyline is the requests: 3 points, none at 0.
	_, after, _ := strings.Cut(string(html), `<polyline fill="none" stroke="#2b6cb0" stroke-width="2" points="`)
	pts, _, _ := strings.Cut(after, `"`)
	if n := len(strings.Fields(pts)); n != 3 {
		t.Fatalf("the requests' line has %d points, want 3: %q", n, pts)
	}
}

func TestHTTPReqFailedMarksAreExplained(t *testing.T) {
	var text bytes.Buffer
	sampleSummary().WriteText(&text)
	// What http_req_failed's ✓ and ✗ count is said once, under its line.
	if n := strings.Count(text.String(), "✓ counts failed requests"); n != 1 ||
		!regexp.MustCompile(`http_req_failed\.+: 1\.00% ✓ 3 ✗ 297\n +↳  ✓ counts failed requests, ✗ the others \(k6's convention for rates\); [^\n]*409`).MatchString(text.String()) {
		t.Fatalf("http_req_failed's marks explained %d times, or not under its line:\n%s", n, text.String())
	}
}

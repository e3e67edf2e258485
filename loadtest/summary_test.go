package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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

func TestSummarySaysWhatOrdersBecame(t *testing.T) {
	// 20 units and 4 VUs ordering one at a time for 500ms: a few orders placed,
	// most refused for stock.
	f := newFakeShop()
	sum := runShop(t, f, map[string]Scenario{"orders": {Executor: ConstantVUs, VUs: 4, Duration: Duration(500 * time.Millisecond),
		Workload: Workload{SKUs: 1, Stock: 20, MaxQuantity: 1}}})
	f.mu.Lock()
	var sent int64 // the shop keeps each order's Idempotency-Key: one per order
	for slot := range f.keys {
		if strings.HasPrefix(slot, "POST /v1/orders ") {
			sent++
		}
	}
	f.mu.Unlock()
	var text bytes.Buffer
	sum.WriteText(&text)
	if sum.Accepted != 20 || sum.Refused == 0 || sum.Accepted+sum.Refused != sent {
		t.Fatalf("%d orders placed, %d refused; the shop had %d orders and 20 units:\n%s", sum.Accepted, sum.Refused, sent, text.String())
	}
	pct := func(n int64) string { return strconv.FormatFloat(100*float64(n)/float64(sent), 'f', 1, 64) + "%" }
	want := fmt.Sprintf("     orders%s: %d sent: 20 placed (%s), %d refused for stock (%s), 0 errors or unanswered (0.0%%)\n",
		strings.Repeat(".", 26), sent, pct(20), sum.Refused, pct(sum.Refused))
	if !strings.Contains(text.String(), want) {
		t.Fatalf("the summary has no line\n%s\n%s", want, text.String())
	}
	j := sum.ownJSON()
	if j["orders_sent"] != sent || j["orders_unanswered"] != int64(0) || j["orders_refused_share"] != float64(sum.Refused)/float64(sent) {
		t.Fatalf("JSON: orders_sent %v, orders_unanswered %v, orders_refused_share %v; want %d, 0, %d/%d",
			j["orders_sent"], j["orders_unanswered"], j["orders_refused_share"], sent, sum.Refused, sent)
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

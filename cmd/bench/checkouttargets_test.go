package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// issueRow finds the row whose what starts with prefix.
func findRow(t *testing.T, rows []issueRow, prefix string) issueRow {
	t.Helper()
	for _, r := range rows {
		if strings.HasPrefix(r.What, prefix) {
			return r
		}
	}
	t.Fatalf("no row %q in %v", prefix, rows)
	return issueRow{}
}

// With nothing measured every row is a dash; the eight rows are always there.
func TestIssueRowsWithNothingMeasured(t *testing.T) {
	rows := issueRows(issueInputs{})
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	for _, r := range rows {
		if r.Now != notMeasured || r.Mark != notMeasured || r.Before == "" || r.Target == "" {
			t.Errorf("row %+v: want a dash for this run and the issue's figures", r)
		}
	}
}

// The rows read the strategies' results and the holds benchmark, and judge them.
func TestIssueRowsJudge(t *testing.T) {
	r := synthetic()
	for i, x := range r.Runs {
		switch {
		case x.Strategy == "db-atomic" && x.VUs == 256:
			r.Runs[i].Memory = Memory{RssAnon: 41 << 20, RssFile: 20 << 20}
		case x.VUs == 16: // RssAnon is judged at 256 VUs
			r.Runs[i].Memory = Memory{RssAnon: 50 << 20, RssFile: 20 << 20}
		}
	}
	h := &HoldsResults{VUs: 64, Points: []HoldsPoint{{Workload: "hot", Orders: 1000, Confirms: 850, ConfirmRatio: 0.85}},
		Sweep:  &SweepResult{Holds: 20_000, Before: 1000, During: 700, Ratio: 0.7},
		Bursts: []BurstResult{{Placed: 200, Confirmed: 195}, {Placed: 200, Confirmed: 180}, {Placed: 200, Confirmed: 199}}}
	rows := issueRows(issueInputs{r: r, h: h})
	for prefix, want := range map[string]issueRow{
		"hot SKU: confirms/s":      {Now: "0.85× (850 ÷ 1000/s, 64 VUs)", Mark: "pass"},
		"orders/s during":          {Now: "0.70× (700 ÷ 1000/s), 20,000 holds", Mark: "**miss**"},
		"default at 256 VUs":       {Now: "49% (3200 of 6500/s, hot)", Mark: "**miss**"},
		"peak RssAnon":             {Now: "41.0 MiB (RssFile 20.0 MiB) at most (db-atomic)", Mark: "**miss**"},
		"confirm burst":            {Now: "195 of 200 (median of 3 bursts, 180-199)", Mark: "pass"},
		"checkout soak":            {Now: notMeasured, Mark: notMeasured},
		"replica CPU per order, l": {Now: "70 µs", Mark: "pass"},
	} {
		got := findRow(t, rows, prefix)
		if (want.Now != "" && got.Now != want.Now) || got.Mark != want.Mark {
			t.Errorf("%s: got %q %q, want %q %q", prefix, got.Now, got.Mark, want.Now, want.Mark)
		}
	}
}

// The full report leads with the section; a holds.json newer than the
// results' holds is what it reads, and writing the holds alone rewrites it.
func TestReportLeadsWithIssueTargets(t *testing.T) {
	r := synthetic()
	r.Machine.When = "2026-01-01T00:00:00Z"
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "out"), markdown: filepath.Join(dir, "BENCHMARKS.md"), workloads: workloads[:1]}
	if err := r.write(o); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Index(string(md), "\n## ")
	if !bytes.HasPrefix(md[first+1:], []byte(issueHeading+"\n")) {
		t.Fatalf("the report does not lead with the issue's targets:\n%s", md[:min(len(md), 600)])
	}
	if !strings.Contains(string(md), "## The strategies' targets (issue 17)") {
		t.Error("the strategies' targets are gone")
	}
	h := &HoldsResults{When: "2026-01-02T00:00:00Z", VUs: 64, Points: []HoldsPoint{{Workload: "hot", Title: "one hot SKU", Orders: 1000, Confirms: 900, ConfirmRatio: 0.9}}}
	if err := h.writeOnly(o); err != nil {
		t.Fatal(err)
	}
	md, err = os.ReadFile(o.markdown)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| hot SKU: confirms/s ÷ orders/s (64 VUs) | 0.08× | ≥ 0.8× | 0.90× (900 ÷ 1000/s, 64 VUs) | pass |") {
		t.Errorf("the holds alone did not rewrite the issue's row:\n%s", md)
	}
	if strings.Count(string(md), issueHeading) != 1 {
		t.Error("the section is in the report twice")
	}
}

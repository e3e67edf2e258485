package main

import (
	"crypto/md5" //nolint:gosec // k6 names groups and checks by the MD5 of their path; not a security use
	"encoding/hex"
	"fmt"
)

// k6Export is the shape of k6's --summary-export file (as k6 v1.8.1 writes it),
// so that tools made for k6 read a loadtest run: a root group with the checks,
// and every metric's values by name, in k6's units (durations in ms). What k6
// has no place for (the audit, the verdicts, the timeline) is under
// "stockguard", which k6's readers ignore: it is what -summary-json writes.
type k6Export struct {
	RootGroup  k6Group                   `json:"root_group"`
	Metrics    map[string]map[string]any `json:"metrics"`
	Stockguard map[string]any            `json:"stockguard"`
}

type k6Group struct {
	Name   string             `json:"name"`
	Path   string             `json:"path"`
	ID     string             `json:"id"`
	Groups map[string]k6Group `json:"groups"`
	Checks map[string]k6Check `json:"checks"`
}

type k6Check struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	ID     string `json:"id"`
	Passes int64  `json:"passes"`
	Fails  int64  `json:"fails"`
}

func k6ID(path string) string {
	sum := md5.Sum([]byte(path)) //nolint:gosec // see the import
	return hex.EncodeToString(sum[:])
}

// WriteExport writes the summary in k6's --summary-export shape to path.
func (s *Summary) WriteExport(path string) error {
	return writeJSON(path, s.export())
}

func (s *Summary) export() k6Export {
	root := k6Group{Name: "", Path: "", ID: k6ID(""), Groups: map[string]k6Group{}, Checks: map[string]k6Check{}}
	for name, c := range s.Named {
		p := "::" + name // k6's path of a check in the root group
		root.Checks[name] = k6Check{Name: name, Path: p, ID: k6ID(p), Passes: c.Passes, Fails: c.Fails}
	}
	secs := s.Duration.Seconds()
	counter := func(n int64) map[string]any {
		r := 0.0
		if secs > 0 {
			r = float64(n) / secs
		}
		return map[string]any{"count": n, "rate": r}
	}
	trendOf := func(metric string) map[string]any {
		out := map[string]any{}
		for _, agg := range []string{"avg", "min", "med", "max"} {
			out[agg] = s.value(metric, agg, 0)
		}
		for _, p := range []float64{90, 95, 99} { // k6's defaults, and p(99) as if summaryTrendStats named it
			out[fmt.Sprintf("p(%v)", p)] = s.value(metric, "p", p)
		}
		return out
	}
	// k6 counts a rate's non-zero samples as passes: for http_req_failed, the
	// failed requests.
	m := map[string]map[string]any{
		"checks":             {"passes": s.Checks - s.ChecksFail, "fails": s.ChecksFail, "value": ratio(s.Checks-s.ChecksFail, s.Checks)},
		"http_req_failed":    {"passes": s.Failed, "fails": s.Reqs - s.Failed, "value": ratio(s.Failed, s.Reqs)},
		"http_req_duration":  trendOf("http_req_duration"),
		"iteration_duration": trendOf("iteration_duration"),
		"http_reqs":          counter(s.Reqs),
		"iterations":         counter(s.Iterations),
		"data_received":      counter(s.BytesIn),
		"data_sent":          counter(s.BytesOut),
		"dropped_iterations": counter(s.Dropped),
		"vus":                {"value": s.VUs.Value, "min": s.VUs.Min, "max": s.VUs.Max},
		// k6's vus_max is the VUs allocated; loadtest counts the VUs running,
		// so it writes the most that ran at once.
		"vus_max": {"value": s.MaxVUs, "min": s.MaxVUs, "max": s.MaxVUs},
	}
	for k, h := range s.byKind {
		if h != nil && h.TotalCount() > 0 {
			m[kindMetric[k]] = trendOf(kindMetric[k])
		}
	}
	if s.Ceiling == "" {
		for _, name := range []string{"orders_accepted", "orders_refused", "oversold"} {
			m[name] = counter(int64(s.value(name, "count", 0)))
		}
		m["orders_cancelled"] = counter(s.Cancelled)
	}
	if s.Audit.Holds != nil {
		for _, name := range []string{"holds_placed", "holds_refused", "units_held", "units_confirmed",
			"units_released", "units_expired", "units_lost", "units_sold_twice"} {
			m[name] = counter(int64(s.value(name, "count", 0)))
		}
	}
	// k6 writes each threshold in its metric as "expression": whether it failed
	// (true means crossed), not whether it passed.
	for _, v := range s.Verdicts {
		mv := m[v.Metric]
		if mv == nil { // a metric the run has no figures for (oversold in a ceiling run): zeros
			switch metricKinds[v.Metric] {
			case trend:
				mv = trendOf(v.Metric)
			case rate:
				mv = map[string]any{"passes": 0, "fails": 0, "value": 0}
			case gauge:
				mv = map[string]any{"value": 0, "min": 0, "max": 0}
			default:
				mv = counter(int64(s.value(v.Metric, "count", 0)))
			}
			m[v.Metric] = mv
		}
		th, _ := mv["thresholds"].(map[string]bool)
		if th == nil {
			th = map[string]bool{}
			mv["thresholds"] = th
		}
		th[v.Expr] = !v.Pass
	}
	return k6Export{RootGroup: root, Metrics: m, Stockguard: s.ownJSON()}
}

package main

import (
	"fmt"
	"html/template"
	"os"
	"strings"
)

// WriteChart writes a self-contained HTML page (inline SVG, no scripts) with
// throughput and latency per second.
func (s *Summary) WriteChart(path, title string) error {
	const w, h, pad = 860, 260, 48
	plot := func(series [][]float64, names, colors []string, unit string) template.HTML {
		var maxY float64
		n := 0
		for _, ys := range series {
			n = max(n, len(ys))
			for _, y := range ys {
				maxY = max(maxY, y)
			}
		}
		if n < 2 || maxY == 0 {
			return template.HTML(`<p>not enough data</p>`)
		}
		x := func(i int) float64 { return pad + float64(i)*(w-2*pad)/float64(n-1) }
		y := func(v float64) float64 { return h - pad + -(v/maxY)*(h-2*pad) }
		var b strings.Builder
		fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="11">`, w, h, w, h)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, pad, h-pad, w-pad, h-pad)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, pad, pad, pad, h-pad)
		for k := 0; k <= 4; k++ {
			v := maxY * float64(k) / 4
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.4g</text>`, pad-4, y(v)+4, v)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`, pad, y(v), w-pad, y(v))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, 4, pad-12, unit)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">seconds</text>`, w-pad, h-pad+32)
		for i := 0; i < n; i += max(1, n/10) {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`, x(i), h-pad+16, i)
		}
		for si, ys := range series {
			var pts []string
			for i, v := range ys {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, colors[si], strings.Join(pts, " "))
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`, w-pad-90*(len(series)-si), pad-12, colors[si], names[si])
		}
		b.WriteString(`</svg>`)
		return template.HTML(b.String()) //nolint:gosec // built here from numbers only
	}
	var reqs, failed, p50, p95, p99 []float64
	for _, p := range s.Timeline {
		reqs = append(reqs, float64(p.Reqs))
		failed = append(failed, float64(p.Failed))
		p50, p95, p99 = append(p50, p.P50), append(p95, p.P95), append(p99, p.P99)
	}
	page := template.Must(template.New("chart").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>body{font-family:sans-serif;margin:2em;color:#222}h1{font-size:1.3em}h2{font-size:1.05em;margin-top:2em}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>{{.Reqs}} requests in {{.Duration}}; oversold: <b>{{.Oversold}}</b>; p(95) {{.P95}}, p(99) {{.P99}}</p>
<h2>Throughput (requests per second)</h2>{{.Throughput}}
<h2>Latency per second</h2>{{.Latency}}
</body></html>
`))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = page.Execute(f, map[string]any{
		"Title": title, "Reqs": s.Reqs, "Duration": s.Duration.Round(100 * 1e6), "Oversold": s.Audit.Oversold,
		"P95": dur(ms(s.reqDur.ValueAtQuantile(95))), "P99": dur(ms(s.reqDur.ValueAtQuantile(99))),
		"Throughput": plot([][]float64{reqs, failed}, []string{"requests", "failed"}, []string{"#2b6cb0", "#c53030"}, "req/s"),
		"Latency":    plot([][]float64{p50, p95, p99}, []string{"p50", "p95", "p99"}, []string{"#2f855a", "#d69e2e", "#c53030"}, "ms"),
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

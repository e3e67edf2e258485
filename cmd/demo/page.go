package main

import (
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The demo's page: both rounds side by side, as inline SVG computed here from
// the samples, so that it opens anywhere with no network and no script.

// Colours of the charts (the screenshot test looks for them).
const (
	colourLeft  = "#1f77b4" // stock left
	colourBelow = "#fbd5d5" // the band below zero: oversold
)

// replicaColours are the replicas' lines, in order, repeated past the fourth.
var replicaColours = []string{"#e6550d", "#31a354", "#756bb1", "#e7298a"}

const (
	chartW, chartH                    = 640, 230
	plotL, plotR, plotTop, plotBottom = 62.0, 628.0, 26.0, 196.0
)

type tick struct {
	Pos   float64
	Label string
}

type line struct {
	Name, Colour, Points string
}

// chart is one SVG, every coordinate computed.
type chart struct {
	Title, Unit, Kind string
	W, H              int
	L, R, Top, Bottom float64
	YTicks, XTicks    []tick
	Zero              float64 // y of the value 0
	Below             bool    // draw the band below zero
	Lines             []line
	Legend            []tick // Pos is x; Label the name; colours from Lines
	Min, Max          float64
}

type scale struct{ lo, hi float64 }

func (s scale) y(v float64) float64 {
	return plotBottom - (v-s.lo)/(s.hi-s.lo)*(plotBottom-plotTop)
}

// span is the scale of the series: from min(0, lowest) to the highest.
func span(series ...[]point) scale {
	s := scale{0, math.Inf(-1)}
	for _, ps := range series {
		for _, p := range ps {
			s.lo, s.hi = min(s.lo, p.V), max(s.hi, p.V)
		}
	}
	if s.hi <= s.lo {
		s.hi = s.lo + 1
	}
	return s
}

func newChart(kind, title, unit string, ys scale, tMax float64, series [][]point, names, colours []string) chart {
	c := chart{Title: title, Unit: unit, Kind: kind, W: chartW, H: chartH, L: plotL, R: plotR, Top: plotTop,
		Bottom: plotBottom, Zero: ys.y(0), Below: ys.lo < 0, Min: math.Inf(1), Max: math.Inf(-1)}
	x := func(t float64) float64 { return plotL + t/tMax*(plotR-plotL) }
	for k := 0; k <= 4; k++ {
		v := ys.lo + (ys.hi-ys.lo)*float64(k)/4
		label := fmt.Sprintf("%.0f", v)
		if ys.hi-ys.lo < 10 {
			label = fmt.Sprintf("%.2g", v)
		}
		c.YTicks = append(c.YTicks, tick{ys.y(v), label})
	}
	step := math.Max(1, math.Ceil(tMax/8))
	for t := 0.0; t <= tMax; t += step {
		c.XTicks = append(c.XTicks, tick{x(t), fmt.Sprintf("%gs", t)})
	}
	for i, ps := range series {
		pts := make([]string, 0, len(ps))
		for _, p := range ps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), ys.y(p.V)))
			c.Min, c.Max = min(c.Min, p.V), max(c.Max, p.V)
		}
		c.Lines = append(c.Lines, line{names[i], colours[i], strings.Join(pts, " ")})
		c.Legend = append(c.Legend, tick{plotR - 96*float64(len(series)-i), names[i]})
	}
	if math.IsInf(c.Min, 0) {
		c.Min, c.Max = 0, 0
	}
	return c
}

// pageLink is the page's address for a browser, absolute when it can be.
func pageLink(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return "file://" + filepath.ToSlash(path)
}

type pageRound struct {
	Strategy, Verdict string
	Oversold          bool
	Charts            []chart
}

// writePage writes the page of the rounds to path, creating its folder.
func writePage(path string, rounds []roundSeries, o options) error {
	var tMax float64
	var rates, lats [][]point
	for _, r := range rounds {
		if n := len(r.Left); n > 0 {
			tMax = max(tMax, r.Left[n-1].T)
		}
		for k := range r.Rate {
			if n := len(r.Rate[k]); n > 0 {
				tMax = max(tMax, r.Rate[k][n-1].T)
			}
		}
		rates, lats = append(rates, r.Rate...), append(lats, r.Latency...)
	}
	tMax = max(tMax, 1)
	// Rates and latencies on one scale for both rounds, so that the halves
	// compare by eye; stock left on each round's own, its zero line marked.
	rateScale, latScale := span(rates...), span(lats...)
	var pr []pageRound
	for _, r := range rounds {
		names := make([]string, len(r.Rate))
		colours := make([]string, len(r.Rate))
		for k := range r.Rate {
			names[k], colours[k] = fmt.Sprintf("replica %d", k+1), replicaColours[k%len(replicaColours)]
		}
		left := newChart("left", "Stock left (stocked − sold − reserved; below zero is oversold)", "units",
			span(r.Left), tMax, [][]point{r.Left}, []string{"stock left"}, []string{colourLeft})
		verdict := fmt.Sprintf("%.0f orders accepted, %.0f units sold of %.0f stocked: oversold %.0f", r.Result.Accepted,
			r.Result.Audit.ServerSold, r.Result.Audit.Stocked, r.Result.Oversold)
		pr = append(pr, pageRound{Strategy: r.Strategy, Verdict: verdict, Oversold: r.Result.Oversold > 0, Charts: []chart{
			left,
			newChart("rate", "Order requests answered per second, per replica", "req/s", rateScale, tMax, r.Rate, names, colours),
			newChart("latency", "Mean latency of the order requests, per replica", "ms", latScale, tMax, r.Latency, names, colours),
		}})
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = pageTemplate.Execute(f, map[string]any{
		"Title": fmt.Sprintf("stockguard demo: %d replicas, one SKU of %d units, %d VUs for %s, locks on %s",
			o.replicas, o.stock, o.vus, o.duration, o.lock),
		"Rounds": pr,
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"add": func(a, b float64) float64 { return a + b },
	"sub": func(a, b float64) float64 { return a - b },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:12px 16px;color:#222;background:#fff}
h1{font-size:17px;margin:0 0 8px}h2{font-size:16px;margin:4px 0}h3{font-size:13px;margin:6px 0 0;font-weight:normal}
.rounds{display:flex;gap:24px}.round{width:652px}
.verdict{margin:2px 0;font-size:13px}.bad{color:#b91c1c;font-weight:bold}.good{color:#166534;font-weight:bold}
</style></head><body>
<h1>{{.Title}}</h1>
<div class="rounds">{{range .Rounds}}
<section class="round" data-strategy="{{.Strategy}}">
<h2>{{.Strategy}}</h2>
<p class="verdict {{if .Oversold}}bad{{else}}good{{end}}">{{.Verdict}}</p>
{{range .Charts}}{{template "chart" .}}{{end}}
</section>{{end}}
</div>
</body></html>
{{define "chart"}}<h3>{{.Title}}</h3>
<svg class="chart" data-kind="{{.Kind}}" data-min="{{.Min}}" data-max="{{.Max}}" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="11" xmlns="http://www.w3.org/2000/svg">
{{if .Below}}<rect x="{{.L}}" y="{{.Zero}}" width="{{printf "%.1f" (sub .R .L)}}" height="{{printf "%.1f" (sub .Bottom .Zero)}}" fill="` + colourBelow + `"/>
<text x="{{printf "%.1f" (sub .R 6)}}" y="{{printf "%.1f" (sub .Bottom 6)}}" text-anchor="end" fill="#b91c1c">below zero: oversold</text>{{end}}
{{$c := .}}{{range .YTicks}}<line x1="{{$c.L}}" y1="{{printf "%.1f" .Pos}}" x2="{{$c.R}}" y2="{{printf "%.1f" .Pos}}" stroke="#eee"/>
<text x="{{printf "%.1f" (sub $c.L 4)}}" y="{{printf "%.1f" (add .Pos 4)}}" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text x="{{printf "%.1f" .Pos}}" y="{{printf "%.1f" (add $c.Bottom 16)}}" text-anchor="middle">{{.Label}}</text>
{{end}}<line x1="{{.L}}" y1="{{.Top}}" x2="{{.L}}" y2="{{.Bottom}}" stroke="#999"/>
<line x1="{{.L}}" y1="{{.Bottom}}" x2="{{.R}}" y2="{{.Bottom}}" stroke="#999"/>
<line x1="{{.L}}" y1="{{printf "%.1f" .Zero}}" x2="{{.R}}" y2="{{printf "%.1f" .Zero}}" stroke="#b91c1c" stroke-dasharray="4 3"/>
<text x="4" y="14">{{.Unit}}</text>
{{range .Lines}}<polyline class="series" data-name="{{.Name}}" fill="none" stroke="{{.Colour}}" stroke-width="3" stroke-linejoin="round" points="{{.Points}}"/>
{{end}}{{range $i, $l := .Legend}}{{with index $c.Lines $i}}<rect x="{{printf "%.1f" $l.Pos}}" y="6" width="14" height="8" fill="{{.Colour}}"/>{{end}}<text x="{{printf "%.1f" (add $l.Pos 18)}}" y="14">{{$l.Label}}</text>
{{end}}</svg>
{{end}}`))

package main

import (
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// The demo's page: the unsafe and the default rounds side by side, then the
// carts round, as inline SVG computed here from the samples, so that it opens
// anywhere with no network and no script.

// Colours of the charts (the screenshot test looks for them).
const (
	colourLeft    = "#1f77b4" // stock left
	colourBelow   = "#fbd5d5" // the band below zero: oversold
	colourCreated = "#1b7837" // 201: orders placed; units sold
	colourRefused = "#8c8c8c" // 409: refused, out of stock
	colourOther   = "#d4a017" // any other answer
	colourAvail   = "#17becf" // carts: units available
	colourHeld    = "#ff7f0e" // carts: units held, and holds granted
)

// replicaColours are the replicas' lines, in order, repeated past the fourth.
var replicaColours = []string{"#e6550d", "#31a354", "#756bb1", "#e7298a"}

const (
	chartW, chartH                    = 640, 220
	plotL, plotR, plotTop, plotBottom = 62.0, 628.0, 26.0, 186.0
	yTicksWanted, xTicksWanted        = 5, 7
)

type tick struct {
	Pos   float64
	Label string
}

type line struct {
	Name, Colour, Points, Dash string
	Max                        float64
}

// chart is one SVG, every coordinate computed.
type chart struct {
	Title, Explain, Unit, Kind string
	W, H                       int
	L, R, Top, Bottom          float64
	YTicks, XTicks             []tick
	Zero                       float64 // y of the value 0
	Below                      bool    // draw the band below zero
	Lines                      []line
	Legend                     []tick // Pos is x; Label the name; colours from Lines
	Min, Max                   float64
}

// series is one line to draw.
type series struct {
	name, colour, dash string
	points             []point
}

// niceTicks returns tick values from lo or below to hi or above, a nice step
// apart (1, 2 or 5 × 10^k) chosen for about n of them. Every tick is a whole
// multiple of the step, so 0 is one of them when the range crosses it.
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		hi = lo + 1
	}
	m, exp := niceStep((hi - lo) / float64(max(n-1, 1)))
	// k × m × 10^exp computed so that 0.1-like steps give 0.3, not 0.30000000000000004.
	value := func(k float64) float64 {
		if exp < 0 {
			return k * m / math.Pow(10, float64(-exp))
		}
		return k * m * math.Pow(10, float64(exp))
	}
	step := value(1)
	first, last := math.Floor(lo/step+1e-9), math.Ceil(hi/step-1e-9)
	ticks := make([]float64, 0, int(last-first)+1)
	for k := first; k <= last; k++ {
		ticks = append(ticks, value(k)+0) // +0: no "-0"
	}
	return ticks
}

// niceStep is the nice number nearest raw: m × 10^exp with m 1, 2 or 5.
func niceStep(raw float64) (m float64, exp int) {
	exp = int(math.Floor(math.Log10(raw)))
	f := raw / math.Pow(10, float64(exp))
	switch {
	case f < 1.5:
		return 1, exp
	case f < 3:
		return 2, exp
	case f < 7:
		return 5, exp
	}
	return 1, exp + 1
}

// tickLabel writes v with as many decimals as the step between ticks needs.
func tickLabel(v, step float64) string {
	return strconv.FormatFloat(v, 'f', max(0, -int(math.Floor(math.Log10(step)+1e-9))), 64)
}

// valueRange is the lowest and highest value of the series, 0 included (every
// chart here counts from zero).
func valueRange(series ...[]point) (lo, hi float64) {
	for _, ps := range series {
		for _, p := range ps {
			lo, hi = min(lo, p.V), max(hi, p.V)
		}
	}
	return lo, hi
}

// lastT is the time of the last point of the series, at least 1 s.
func lastT(series ...[]point) float64 {
	t := 1.0
	for _, ps := range series {
		if n := len(ps); n > 0 {
			t = max(t, ps[n-1].T)
		}
	}
	return t
}

// newChart draws the series on a value axis with nice ticks covering lo..hi
// and a time axis with nice ticks covering 0..tMax seconds.
func newChart(kind, title, explain, unit string, lo, hi, tMax float64, lines []series) chart {
	yt, xt := niceTicks(lo, hi, yTicksWanted), niceTicks(0, tMax, xTicksWanted)
	yLo, yHi, xHi := yt[0], yt[len(yt)-1], xt[len(xt)-1]
	y := func(v float64) float64 { return plotBottom - (v-yLo)/(yHi-yLo)*(plotBottom-plotTop) }
	x := func(t float64) float64 { return plotL + t/xHi*(plotR-plotL) }
	c := chart{Title: title, Explain: explain, Unit: unit, Kind: kind, W: chartW, H: chartH, L: plotL, R: plotR,
		Top: plotTop, Bottom: plotBottom, Zero: y(0), Below: yLo < 0, Min: math.Inf(1), Max: math.Inf(-1)}
	for _, v := range yt {
		c.YTicks = append(c.YTicks, tick{y(v), tickLabel(v, yt[1]-yt[0])})
	}
	for _, t := range xt {
		c.XTicks = append(c.XTicks, tick{x(t), tickLabel(t, xt[1]-xt[0]) + "s"})
	}
	legendX := plotR
	for i := len(lines) - 1; i >= 0; i-- { // right-aligned: each entry as wide as its name
		legendX -= 26 + 6.2*float64(len([]rune(lines[i].name)))
		c.Legend = append([]tick{{legendX, lines[i].name}}, c.Legend...)
	}
	for _, l := range lines {
		pts := make([]string, 0, len(l.points))
		top := 0.0
		for _, p := range l.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.T), y(p.V)))
			c.Min, c.Max, top = min(c.Min, p.V), max(c.Max, p.V), max(top, p.V)
		}
		c.Lines = append(c.Lines, line{Name: l.name, Colour: l.colour, Dash: l.dash, Points: strings.Join(pts, " "), Max: top})
	}
	if math.IsInf(c.Min, 0) {
		c.Min, c.Max = 0, 0
	}
	return c
}

// changeText is an event's change, its non-zero counters signed.
func changeText(l client.Levels) string {
	var parts []string
	for _, c := range []struct {
		name string
		v    int
	}{{"available", l.Available}, {"reserved", l.Reserved}, {"sold", l.Sold}, {"stocked", l.Stocked}} {
		if c.v != 0 {
			parts = append(parts, fmt.Sprintf("%s %+d", c.name, c.v))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// countersText is a SKU's four counters, short.
func countersText(l client.Levels) string {
	return fmt.Sprintf("available %d, reserved %d, sold %d, stocked %d", l.Available, l.Reserved, l.Sold, l.Stocked)
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

// answerSeries are a round's answers per second as lines: sales (or holds)
// and refusals always, other answers only when there were any.
func answerSeries(a answerLines, created string) []series {
	out := []series{{name: created, colour: colourCreated, points: a.Created},
		{name: "409 refused", colour: colourRefused, dash: "6 3", points: a.Refused}}
	if _, hi := valueRange(a.Other); hi > 0 {
		out = append(out, series{name: "other answers", colour: colourOther, points: a.Other})
	}
	return out
}

// Each chart's line of explanation: what is across, what is up.
const (
	explainLeft = "Across: seconds since the load started. Up: units still for sale (stocked − sold − reserved), " +
		"read every 50 ms; below the dashed zero line, units were sold that did not exist."
	explainAnswers = "Across: seconds. Up: answers per second, all replicas together (250 ms windows): 201, an order " +
		"placed (a retry's replay included); 409, refused, sold out. Refusals are fast, but they sell nothing."
	explainLatency = "Across: seconds. Up: each replica's mean time to answer an order request (250 ms windows); " +
		"a VU waits for its answer before sending the next, so slower answers mean fewer requests."
	explainCartsStock = "Across: seconds since the sale opened. Up: the SKU's units available, held in carts, sold. " +
		"Abandoned carts expire after the hold's time to live; the sweeper puts their units back, and shoppers " +
		"refused earlier hold and buy them."
	explainCartsAnswers = "Across: seconds since the sale opened. Up: answers per second to requests for a cart (a hold), " +
		"all replicas together (250 ms windows): 201, units held; 409, refused, none available."
)

// writePage writes the page of the rounds, and of the carts round when carts
// is not nil, to path, creating its folder.
func writePage(path string, rounds []roundSeries, carts *cartResult, o options, co cartOptions) error {
	var all, answers, lats [][]point
	for _, r := range rounds {
		answers = append(answers, r.Answers.Created, r.Answers.Refused, r.Answers.Other)
		lats = append(lats, r.Latency...)
		all = append(append(all, r.Left), r.Latency...)
	}
	all = append(all, answers...)
	tMax := lastT(all...)
	// Answers and latencies on one scale for both rounds, so that the halves
	// compare by eye; stock left on each round's own, its zero line marked.
	aLo, aHi := valueRange(answers...)
	lLo, lHi := valueRange(lats...)
	var pr []pageRound
	for _, r := range rounds {
		var perReplica []series
		for k, ps := range r.Latency {
			perReplica = append(perReplica, series{name: fmt.Sprintf("replica %d", k+1),
				colour: replicaColours[k%len(replicaColours)], points: ps})
		}
		lo, hi := valueRange(r.Left)
		verdict := fmt.Sprintf("%.0f orders accepted, %.0f units sold of %.0f stocked: oversold %.0f", r.Result.Accepted,
			r.Result.Audit.ServerSold, r.Result.Audit.Stocked, r.Result.Oversold)
		pr = append(pr, pageRound{Strategy: r.Strategy, Verdict: verdict, Oversold: r.Result.Oversold > 0, Charts: []chart{
			newChart("left", "Stock left (stocked − sold − reserved; below zero is oversold)", explainLeft, "units",
				lo, hi, tMax, []series{{name: "stock left", colour: colourLeft, points: r.Left}}),
			newChart("answers", "Answers to order requests per second: sales (201) and refusals (409) apart", explainAnswers,
				"answers/s", aLo, aHi, tMax, answerSeries(r.Answers, "201 placed")),
			newChart("latency", "Mean latency of the order requests, per replica", explainLatency, "ms",
				lLo, lHi, tMax, perReplica),
		}})
	}
	data := map[string]any{
		"Title": fmt.Sprintf("stockguard demo: %d replicas, one SKU of %d units, %d VUs for %s, locks on %s",
			o.replicas, o.stock, o.vus, o.duration, o.lock),
		"Intro": fmt.Sprintf("A VU (virtual user) is one simulated client: it sends an order request, waits for the answer, "+
			"and sends the next. %d VUs ran for %s against each strategy: on the left the control group (unsafe), "+
			"on the right the default; below them, a flash sale with carts.", o.vus, o.duration),
		"Rounds": pr,
	}
	if carts != nil {
		s := carts.Stock
		lo, hi := valueRange(s.Available, s.Held, s.Sold)
		aLo, aHi := valueRange(carts.Answers.Created, carts.Answers.Refused, carts.Answers.Other)
		tMax := lastT(s.Available, s.Held, s.Sold, carts.Answers.Created)
		data["Carts"] = pageRound{Strategy: cartsRound, Oversold: carts.Oversold > 0,
			Verdict: fmt.Sprintf("%d shoppers, %d units, holds of %s: %d units held in %d carts, %d sold; %d came back "+
				"from abandoned carts and %d of them were sold again: oversold %d", co.shoppers, carts.Stocked, co.ttl,
				carts.Held, carts.Holds, carts.Sold, carts.Expired, carts.Resold, carts.Oversold),
			Charts: []chart{
				newChart("carts-stock", "The SKU's units: available, held in carts, sold", explainCartsStock, "units",
					lo, hi, tMax, []series{{name: "available", colour: colourAvail, points: s.Available},
						{name: "held", colour: colourHeld, points: s.Held},
						{name: "sold", colour: colourCreated, points: s.Sold}}),
				newChart("carts-answers", "Answers to cart requests per second: holds granted (201) and refused (409)",
					explainCartsAnswers, "answers/s", aLo, aHi, tMax, answerSeries(carts.Answers, "201 held")),
			}}
	}
	var events []eventReport
	for _, r := range rounds {
		if r.Events != nil {
			events = append(events, *r.Events)
		}
	}
	if carts != nil && carts.Events != nil {
		events = append(events, *carts.Events)
	}
	data["Events"] = events
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = pageTemplate.Execute(f, data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"add":      func(a, b float64) float64 { return a + b },
	"sub":      func(a, b float64) float64 { return a - b },
	"change":   changeText,
	"counters": countersText,
	"time":     func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font-family:sans-serif;margin:12px 16px;color:#222;background:#fff}
h1{font-size:17px;margin:0 0 4px}h2{font-size:16px;margin:4px 0}h3{font-size:13px;margin:6px 0 0}
.intro{font-size:13px;margin:0 0 6px;max-width:1328px}
.rounds,.pair{display:flex;gap:24px}.round{width:652px}.carts{margin-top:10px}
.verdict{margin:2px 0;font-size:13px}.bad{color:#b91c1c;font-weight:bold}.good{color:#166534;font-weight:bold}
.explain{font-size:12px;color:#555;margin:1px 0 0;width:640px;line-height:1.3}
.events{margin-top:14px;max-width:1328px}.event-round{margin:8px 0 12px}
.events-explain{font-size:12px;color:#555;margin:1px 0 4px;line-height:1.3}
.events table{border-collapse:collapse;font-size:12px;margin:4px 0}
.events th,.events td{border:1px solid #ddd;padding:2px 6px;text-align:right}
.events th{background:#f4f4f4}.events td.text,.events th.text{text-align:left}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="intro">{{.Intro}}</p>
<div class="rounds">{{range .Rounds}}
<section class="round" data-strategy="{{.Strategy}}">
<h2>{{.Strategy}}</h2>
<p class="verdict {{if .Oversold}}bad{{else}}good{{end}}">{{.Verdict}}</p>
{{range .Charts}}{{template "chart" .}}{{end}}
</section>{{end}}
</div>
{{with .Carts}}<section class="carts" data-strategy="{{.Strategy}}">
<h2>carts: a flash sale with holds that expire</h2>
<p class="verdict {{if .Oversold}}bad{{else}}good{{end}}">{{.Verdict}}</p>
<div class="pair">{{range .Charts}}<div>{{template "chart" .}}</div>{{end}}</div>
</section>{{end}}
{{with .Events}}<section class="events">
<h2>The stock events of each round, from the feed (GET /v1/events)</h2>
<p class="events-explain">Every change of a SKU's counters writes one event in the transaction that makes it, numbered per SKU
(seq) with no gap; the relay then places it in the feed and, with --nats-url, publishes it to NATS JetStream.</p>
{{range .}}<div class="event-round" data-round="{{.Round}}" data-ok="{{.OK}}" data-events="{{.Events}}">
<h3>{{.Round}}</h3>
<p class="verdict {{if .Unsafe}}bad{{else if .OK}}good{{else}}bad{{end}}">{{.Verdict}}</p>
<p class="events-explain">{{.Explain}}</p>
<table class="types"><tr><th class="text">events by type</th>{{range .Types}}<th>{{.Type}}</th>{{end}}<th>all</th></tr>
<tr><td class="text">count</td>{{range .Types}}<td data-type="{{.Type}}">{{.Count}}</td>{{end}}<td>{{.Events}}</td></tr></table>
<table class="skus"><tr><th class="text">SKU</th><th>events</th><th>seq</th><th>missing</th><th>out of order</th>
<th class="text">rebuilt from the events</th><th class="text">the SKU's counters</th><th>counters ≠ previous + change</th></tr>
{{range .SKUs}}<tr data-sku="{{.SKU}}" data-matches="{{.Matches}}" data-gaps="{{.Gaps}}" data-stale="{{.Stale}}"><td class="text">{{.SKU}}</td><td>{{.Events}}</td><td>{{.FirstSeq}} to {{.Seq}}</td>
<td>{{.Gaps}}</td><td>{{.Repeats}}</td><td class="text">{{counters .Rebuilt}}</td><td class="text">{{counters .Current}}</td><td>{{.Stale}}</td></tr>
{{end}}</table>
{{if .First}}<table class="sample"><tr><th class="text">id</th><th class="text">type</th><th class="text">SKU</th><th>seq</th><th>quantity</th>
<th class="text">change</th><th class="text">counters after</th><th class="text">order or hold</th><th class="text">at</th></tr>
{{range .First}}{{template "event" .}}{{end}}{{if .Last}}<tr><td class="text" colspan="9">…</td></tr>
{{range .Last}}{{template "event" .}}{{end}}{{end}}</table>{{end}}
</div>
{{end}}</section>{{end}}
</body></html>
{{define "event"}}<tr class="event"><td class="text">{{.ID}}</td><td class="text">{{.Type}}</td><td class="text">{{.SKU}}</td><td>{{.Seq}}</td><td>{{.Quantity}}</td>
<td class="text">{{change .Change}}</td><td class="text">{{counters .Counters}}</td><td class="text">{{with .OrderID}}order {{.}}{{end}}{{if and .OrderID .ReservationID}}, {{end}}{{with .ReservationID}}hold {{.}}{{end}}</td><td class="text">{{time .CreatedAt}}</td></tr>
{{end}}
{{define "chart"}}<h3>{{.Title}}</h3>
<p class="explain">{{.Explain}}</p>
<svg class="chart" data-kind="{{.Kind}}" data-min="{{.Min}}" data-max="{{.Max}}" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="11" xmlns="http://www.w3.org/2000/svg">
{{if .Below}}<rect x="{{.L}}" y="{{printf "%.1f" .Zero}}" width="{{printf "%.1f" (sub .R .L)}}" height="{{printf "%.1f" (sub .Bottom .Zero)}}" fill="` + colourBelow + `"/>
<text x="{{printf "%.1f" (sub .R 6)}}" y="{{printf "%.1f" (sub .Bottom 6)}}" text-anchor="end" fill="#b91c1c">below zero: oversold</text>{{end}}
{{$c := .}}{{range .YTicks}}<line x1="{{$c.L}}" y1="{{printf "%.1f" .Pos}}" x2="{{$c.R}}" y2="{{printf "%.1f" .Pos}}" stroke="#eee"/>
<text class="ytick" x="{{printf "%.1f" (sub $c.L 4)}}" y="{{printf "%.1f" (add .Pos 4)}}" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text class="xtick" x="{{printf "%.1f" .Pos}}" y="{{printf "%.1f" (add $c.Bottom 16)}}" text-anchor="middle">{{.Label}}</text>
{{end}}<line x1="{{.L}}" y1="{{.Top}}" x2="{{.L}}" y2="{{.Bottom}}" stroke="#999"/>
<line x1="{{.L}}" y1="{{.Bottom}}" x2="{{.R}}" y2="{{.Bottom}}" stroke="#999"/>
<line x1="{{.L}}" y1="{{printf "%.1f" .Zero}}" x2="{{.R}}" y2="{{printf "%.1f" .Zero}}" stroke="#b91c1c" stroke-dasharray="4 3"/>
<text x="4" y="14">{{.Unit}}</text>
{{range .Lines}}<polyline class="series" data-name="{{.Name}}" data-max="{{.Max}}" fill="none" stroke="{{.Colour}}" stroke-width="3" stroke-linejoin="round"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}} points="{{.Points}}"/>
{{end}}{{range $i, $l := .Legend}}{{with index $c.Lines $i}}<rect x="{{printf "%.1f" $l.Pos}}" y="6" width="14" height="8" fill="{{.Colour}}"/>{{end}}<text x="{{printf "%.1f" (add $l.Pos 18)}}" y="14">{{$l.Label}}</text>
{{end}}</svg>
{{end}}`))

package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// palette gives every strategy the same colour in every chart.
var palette = []color.Color{
	color.RGBA{R: 0x1b, G: 0x9e, B: 0x77, A: 0xff}, color.RGBA{R: 0xd9, G: 0x5f, B: 0x02, A: 0xff},
	color.RGBA{R: 0x75, G: 0x70, B: 0xb3, A: 0xff}, color.RGBA{R: 0xe7, G: 0x29, B: 0x8a, A: 0xff},
	color.RGBA{R: 0x66, G: 0xa6, B: 0x1e, A: 0xff}, color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff},
}

// charts writes throughput.png (orders/s against VUs per strategy, one panel per
// workload, pgbench's ceiling on the hot SKU's) and latency.png (p50, p95 and p99
// per strategy at the most VUs, one panel per workload).
func (r *Results) charts(dir string) error {
	var tput, lat []*plot.Plot
	top := slices.Max(r.Profile.VUs)
	for _, w := range workloads {
		if _, ok := r.point(r.strategies()[0], w.Name, top); !ok {
			continue
		}
		t, err := r.throughputPlot(w)
		if err != nil {
			return err
		}
		l, err := r.latencyPlot(w, top)
		if err != nil {
			return err
		}
		tput, lat = append(tput, t), append(lat, l)
	}
	if err := savePanels(filepath.Join(dir, "throughput.png"), tput); err != nil {
		return err
	}
	var cpu []*plot.Plot
	for _, w := range workloads {
		if _, ok := r.cost(r.strategies()[0], w.Name); !ok {
			continue
		}
		c, err := r.cpuPlot(w)
		if err != nil {
			return err
		}
		cpu = append(cpu, c)
	}
	if err := savePanels(filepath.Join(dir, "cpu.png"), cpu); err != nil {
		return err
	}
	if r.Holds != nil {
		if err := r.Holds.chart(filepath.Join(dir, "holds.png")); err != nil {
			return err
		}
	}
	if r.Locks != nil {
		if err := r.Locks.writeFiles(dir); err != nil { // locks.json and locks.png
			return err
		}
	}
	if r.Events != nil {
		if err := r.Events.writeFiles(dir); err != nil { // events.json and events.png
			return err
		}
	}
	if r.Auth != nil {
		if err := r.Auth.writeFiles(dir); err != nil { // auth.json and auth.png
			return err
		}
	}
	if r.Locations != nil {
		if err := r.Locations.writeFiles(dir); err != nil { // locations.json and locations.png
			return err
		}
	}
	return savePanels(filepath.Join(dir, "latency.png"), lat)
}

func (r *Results) throughputPlot(w Workload) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = w.Title + ": accepted orders/s"
	p.X.Label.Text = "VUs"
	p.Y.Label.Text = "orders/s (log)"
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, vusTicks(r.Profile.VUs)
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, oneTwoFive{}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	for i, s := range r.strategies() {
		var xys plotter.XYs
		for _, v := range r.Profile.VUs {
			if pt, ok := r.point(s, w.Name, v); ok {
				xys = append(xys, plotter.XY{X: float64(v), Y: max(pt.OrdersPerSec, 1)})
			}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		c := palette[i%len(palette)]
		line.Color, points.Color, line.Width = c, c, vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(s, line, points)
	}
	if pg := median(r.PgBench); w.Name == "hot" && pg > 0 {
		ceiling, err := plotter.NewLine(plotter.XYs{{X: float64(r.Profile.VUs[0]), Y: pg}, {X: float64(slices.Max(r.Profile.VUs)), Y: pg}})
		if err != nil {
			return nil, err
		}
		ceiling.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ceiling)
		p.Legend.Add(fmt.Sprintf("pgbench, 1 row/commit (%.0f tps)", pg), ceiling)
	}
	if len(r.Ceiling) > 0 {
		var xys plotter.XYs
		for _, c := range r.Ceiling {
			xys = append(xys, plotter.XY{X: float64(c.VUs), Y: max(c.ReqsPerSec, 1)})
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}, vg.Points(2)
		line.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(line)
		p.Legend.Add("ceiling: GET "+ceilingPath, line)
	}
	p.Y.Max *= 12 // headroom on the log axis: the legend above the lines
	return p, nil
}

// cpuPlot draws each strategy's CPU per accepted order on one workload,
// stacked by part.
func (r *Results) cpuPlot(w Workload) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = w.Title + ": CPU per accepted order"
	p.Y.Label.Text = "µs"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	names := r.strategies()
	parts := []struct {
		label string
		of    func(CPU) float64
		c     color.RGBA
	}{
		{"replicas", func(c CPU) float64 { return c.Replicas }, color.RGBA{R: 0x33, G: 0x66, B: 0xcc, A: 0xff}},
		{"Redis", func(c CPU) float64 { return c.Redis }, color.RGBA{R: 0xcc, G: 0x33, B: 0x33, A: 0xff}},
		{"PostgreSQL", func(c CPU) float64 { return c.Postgres }, color.RGBA{R: 0x33, G: 0x99, B: 0x55, A: 0xff}},
	}
	var below *plotter.BarChart
	for _, part := range parts {
		vals := make(plotter.Values, len(names))
		for i, s := range names {
			c, _ := r.cost(s, w.Name)
			vals[i] = 1e6 * part.of(c.CPU)
		}
		bars, err := plotter.NewBarChart(vals, vg.Points(20))
		if err != nil {
			return nil, err
		}
		bars.Color, bars.LineStyle.Width = part.c, 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		p.Legend.Add(part.label, bars)
	}
	p.NominalX(names...)
	p.Y.Max *= 1.3 // room for the legend
	return p, nil
}

func (r *Results) latencyPlot(w Workload, vus int) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, %d VUs: latency", w.Title, vus)
	p.Y.Label.Text = "ms"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	names := r.strategies()
	width := vg.Points(9)
	shades := []uint8{0x55, 0x99, 0xdd}
	for q, label := range []string{"p50", "p95", "p99"} {
		vals := make(plotter.Values, len(names))
		for i, s := range names {
			pt, _ := r.point(s, w.Name, vus)
			vals[i] = []float64{pt.P50, pt.P95, pt.P99}[q]
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		g := 0xff - shades[q]
		bars.Color = color.RGBA{R: g / 2, G: g / 2, B: g, A: 0xff}
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(q-1)
		p.Add(bars)
		p.Legend.Add(label, bars)
	}
	p.NominalX(names...)
	return p, nil
}

// oneTwoFive marks 1, 2 and 5 times the powers of ten on a log axis.
type oneTwoFive struct{}

func (oneTwoFive) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for p := 1.0; p <= hi*10; p *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if v := m * p; v >= lo && v <= hi {
				out = append(out, plot.Tick{Value: v, Label: fmt.Sprint(v)})
			}
		}
	}
	return out
}

// vusTicks marks the VU counts measured on a log axis.
type vusTicks []int

func (t vusTicks) Ticks(_, _ float64) []plot.Tick {
	out := make([]plot.Tick, len(t))
	for i, v := range t {
		out[i] = plot.Tick{Value: float64(v), Label: fmt.Sprint(v)}
	}
	return out
}

// savePanels draws plots side by side into one PNG.
func savePanels(path string, plots []*plot.Plot) error {
	if len(plots) == 0 {
		return nil
	}
	img := vgimg.New(vg.Length(len(plots))*vg.Points(420), vg.Points(340))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Points(14), PadY: vg.Points(10),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	white := dc
	white.SetColor(color.White)
	white.Fill(white.Path())
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for j, p := range plots {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The source's grammar is documented at the top of docs/architecture.txt; this
// file parses it (parse), places its boxes on the grid (layout) and writes the
// SVG (render). Everything is computed from the source alone, with no font
// metrics and no map iterated, so the same source gives the same bytes.

// diagram is a parsed source.
type diagram struct {
	title   string
	width   int
	columns int
	boxes   []*box
	groups  []*group
	arrows  []*arrow

	// Set by layout.
	height float64
}

// box is a rounded rectangle on one row of the grid, spanning columns
// col..col+span-1.
type box struct {
	id, label string
	sub       []string
	row, col  int
	span      int
	colour    string
	line      int
	r         rect
}

// group is a dashed frame around some boxes.
type group struct {
	id, label string
	members   []*box
	line      int
	inner     rect // the members' bounding box
	r         rect // inner with the frame's padding
}

// arrow joins two boxes or groups.
type arrow struct {
	from, to string
	label    []string
	dashed   bool
	at       float64
	line     int
}

type rect struct{ x, y, w, h float64 }

func (r rect) right() float64  { return r.x + r.w }
func (r rect) bottom() float64 { return r.y + r.h }
func (r rect) cx() float64     { return r.x + r.w/2 }
func (r rect) cy() float64     { return r.y + r.h/2 }

// palette is the colours a box may take: a light fill and a darker stroke.
var palette = map[string][2]string{
	"grey":   {"#f3f4f6", "#6b7280"},
	"blue":   {"#e8f0fe", "#3b6fd8"},
	"green":  {"#e6f4ea", "#2f8a4c"},
	"amber":  {"#fff4d6", "#b7791f"},
	"purple": {"#f1eafd", "#7c4dcc"},
	"red":    {"#fde8e8", "#c0392b"},
	"teal":   {"#e0f4f4", "#1f8a8a"},
	"orange": {"#ffeedd", "#d9661f"},
}

func paletteNames() string {
	names := make([]string, 0, len(palette))
	for n := range palette {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Sizes, in pixels.
const (
	margin      = 20.0
	colGap      = 24.0
	labelSize   = 14.0
	subSize     = 12.0
	arrowSize   = 11.0
	labelLine   = 18.0
	subLine     = 15.0
	arrowLine   = 14.0
	boxPadTop   = 12.0
	boxPadBelow = 10.0
	boxPadSide  = 8.0
	groupPad    = 12.0 // a frame's sides and bottom
	groupTop    = 26.0 // a frame's top: room for its label
	rowGap      = 36.0 // between rows, at least
	// Average glyph widths of a sans-serif font, in ems, rounded up: enough to
	// refuse a text that would not fit its box, without the font's metrics.
	boldEm  = 0.6
	plainEm = 0.55
)

// token is a word or a quoted string of a source line.
type token struct {
	text   string
	quoted bool
}

// tokenize splits a line into words and double-quoted strings (\" and \\
// escape), dropping a # comment outside quotes.
func tokenize(line string) ([]token, error) {
	var toks []token
	for i := 0; i < len(line); {
		switch line[i] {
		case ' ', '\t', '\r':
			i++
		case '#':
			return toks, nil
		case '"':
			var b strings.Builder
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("a string with no closing quote")
				}
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					b.WriteByte(line[i+1])
					i += 2
					continue
				}
				if line[i] == '"' {
					i++
					break
				}
				b.WriteByte(line[i])
				i++
			}
			toks = append(toks, token{text: b.String(), quoted: true})
		default:
			j := i
			for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != '"' && line[j] != '#' {
				j++
			}
			toks = append(toks, token{text: line[i:j]})
			i = j
		}
	}
	return toks, nil
}

// parse reads a source; its errors name the line at fault.
func parse(r io.Reader) (*diagram, error) {
	d := &diagram{}
	ids := map[string]int{} // id -> line that declared it
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		toks, err := tokenize(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if len(toks) == 0 {
			continue
		}
		if toks[0].quoted {
			return nil, fmt.Errorf("line %d: a statement starts with a keyword (canvas, box, group, arrow), not a string", n)
		}
		switch toks[0].text {
		case "canvas":
			err = d.parseCanvas(toks[1:])
		case "box":
			var b *box
			if b, err = parseBox(toks[1:], n); err == nil {
				err = declare(ids, b.id, n)
				d.boxes = append(d.boxes, b)
			}
		case "group":
			var g *group
			if g, err = d.parseGroup(toks[1:], n); err == nil {
				err = declare(ids, g.id, n)
				d.groups = append(d.groups, g)
			}
		case "arrow":
			var a *arrow
			if a, err = parseArrow(toks[1:], n); err == nil {
				d.arrows = append(d.arrows, a)
			}
		default:
			err = fmt.Errorf("unknown statement %q (canvas, box, group or arrow)", toks[0].text)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return d, d.check()
}

func declare(ids map[string]int, id string, line int) error {
	if prev, ok := ids[id]; ok {
		return fmt.Errorf("%q is already declared on line %d", id, prev)
	}
	ids[id] = line
	return nil
}

// options splits key=value words from the rest.
func options(toks []token) (map[string]string, []token, error) {
	opts := map[string]string{}
	var rest []token
	for _, t := range toks {
		k, v, ok := strings.Cut(t.text, "=")
		if t.quoted || !ok {
			rest = append(rest, t)
			continue
		}
		if _, dup := opts[k]; dup {
			return nil, nil, fmt.Errorf("%s= given twice", k)
		}
		opts[k] = v
	}
	return opts, rest, nil
}

func whole(opts map[string]string, key string) (int, error) {
	v, ok := opts[key]
	if !ok {
		return 0, fmt.Errorf("%s= is missing", key)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%s: not a whole number", key, v)
	}
	return n, nil
}

func noOtherOptions(opts map[string]string, known ...string) error {
	for k := range opts {
		if !slices.Contains(known, k) {
			return fmt.Errorf("unknown option %s= (this statement takes %s)", k, strings.Join(known, "=, ")+"=")
		}
	}
	return nil
}

func (d *diagram) parseCanvas(toks []token) error {
	if d.width != 0 {
		return errors.New("a second canvas statement")
	}
	opts, rest, err := options(toks)
	if err != nil {
		return err
	}
	if err := noOtherOptions(opts, "width", "columns"); err != nil {
		return err
	}
	if d.width, err = whole(opts, "width"); err != nil {
		return err
	}
	if d.columns, err = whole(opts, "columns"); err != nil {
		return err
	}
	if d.width < 200 || d.columns < 1 {
		return errors.New("width= must be at least 200 and columns= at least 1")
	}
	if len(rest) != 1 || !rest[0].quoted {
		return errors.New(`canvas takes width=, columns= and one "title"`)
	}
	d.title = rest[0].text
	return nil
}

func checkID(t token) error {
	if t.quoted || t.text == "" || strings.ContainsAny(t.text, "=-") {
		return fmt.Errorf("%q is not an id (a word with no '=' or '-')", t.text)
	}
	return nil
}

func parseBox(toks []token, line int) (*box, error) {
	if len(toks) == 0 {
		return nil, errors.New("box needs an id")
	}
	if err := checkID(toks[0]); err != nil {
		return nil, err
	}
	b := &box{id: toks[0].text, line: line, span: 1, colour: "grey"}
	opts, rest, err := options(toks[1:])
	if err != nil {
		return nil, err
	}
	if err := noOtherOptions(opts, "row", "col", "colour"); err != nil {
		return nil, err
	}
	if b.row, err = whole(opts, "row"); err != nil {
		return nil, err
	}
	col, ok := opts["col"]
	if !ok {
		return nil, errors.New("col= is missing")
	}
	first, last, isRange := strings.Cut(col, "..")
	if b.col, err = strconv.Atoi(first); err != nil || b.col < 0 {
		return nil, fmt.Errorf("col=%s: not a column or a range of them (2, or 1..3)", col)
	}
	if isRange {
		end, err := strconv.Atoi(last)
		if err != nil || end < b.col {
			return nil, fmt.Errorf("col=%s: not a column or a range of them (2, or 1..3)", col)
		}
		b.span = end - b.col + 1
	}
	if c, ok := opts["colour"]; ok {
		if _, known := palette[c]; !known {
			return nil, fmt.Errorf("colour=%s: not one of %s", c, paletteNames())
		}
		b.colour = c
	}
	for _, t := range rest {
		if !t.quoted {
			return nil, fmt.Errorf("%q: a box takes row=, col=, colour= and strings", t.text)
		}
	}
	if len(rest) == 0 {
		return nil, errors.New(`box needs a "label"`)
	}
	b.label = rest[0].text
	for _, t := range rest[1:] {
		b.sub = append(b.sub, t.text)
	}
	return b, nil
}

func (d *diagram) parseGroup(toks []token, line int) (*group, error) {
	if len(toks) < 3 {
		return nil, errors.New(`group takes an id, a "label" and the boxes it frames`)
	}
	if err := checkID(toks[0]); err != nil {
		return nil, err
	}
	if !toks[1].quoted {
		return nil, errors.New(`group takes an id, a "label" and the boxes it frames`)
	}
	g := &group{id: toks[0].text, label: toks[1].text, line: line}
	for _, t := range toks[2:] {
		i := slices.IndexFunc(d.boxes, func(b *box) bool { return b.id == t.text })
		if t.quoted || i < 0 {
			return nil, fmt.Errorf("%q is not a box declared above", t.text)
		}
		if slices.Contains(g.members, d.boxes[i]) {
			return nil, fmt.Errorf("box %q is named twice", t.text)
		}
		g.members = append(g.members, d.boxes[i])
	}
	return g, nil
}

func parseArrow(toks []token, line int) (*arrow, error) {
	if len(toks) < 3 || toks[1].quoted || toks[1].text != "->" {
		return nil, errors.New(`arrow takes FROM -> TO, then dashed, at= and "label" lines`)
	}
	for _, t := range []token{toks[0], toks[2]} {
		if err := checkID(t); err != nil {
			return nil, err
		}
	}
	a := &arrow{from: toks[0].text, to: toks[2].text, at: 0.5, line: line}
	opts, rest, err := options(toks[3:])
	if err != nil {
		return nil, err
	}
	if err := noOtherOptions(opts, "at"); err != nil {
		return nil, err
	}
	if v, ok := opts["at"]; ok {
		a.at, err = strconv.ParseFloat(v, 64)
		if err != nil || a.at < 0 || a.at > 1 {
			return nil, fmt.Errorf("at=%s: not a fraction from 0 to 1", v)
		}
	}
	for _, t := range rest {
		switch {
		case t.quoted:
			a.label = append(a.label, t.text)
		case t.text == "dashed" && len(a.label) == 0:
			a.dashed = true
		default:
			return nil, fmt.Errorf("%q: an arrow takes dashed, at= and strings", t.text)
		}
	}
	return a, nil
}

// check refuses what parses but cannot be drawn: no canvas, a box off the
// grid or on another, an arrow to nothing.
func (d *diagram) check() error {
	if d.width == 0 {
		return errors.New("no canvas statement")
	}
	for i, b := range d.boxes {
		if b.col+b.span > d.columns {
			return fmt.Errorf("line %d: box %q: col=%d..%d is off the grid (columns 0..%d)", b.line, b.id, b.col, b.col+b.span-1, d.columns-1)
		}
		for _, o := range d.boxes[:i] {
			if o.row == b.row && b.col < o.col+o.span && o.col < b.col+b.span {
				return fmt.Errorf("line %d: box %q overlaps box %q (line %d)", b.line, b.id, o.id, o.line)
			}
		}
	}
	for _, a := range d.arrows {
		for _, id := range []string{a.from, a.to} {
			if d.find(id) == nil {
				return fmt.Errorf("line %d: arrow %s -> %s: no box or group %q", a.line, a.from, a.to, id)
			}
		}
		if a.from == a.to {
			return fmt.Errorf("line %d: arrow %s -> %s: from a box to itself", a.line, a.from, a.to)
		}
	}
	return nil
}

// node is what an arrow joins: its outer rect (where the line starts or ends),
// its inner one (what the line is centred on), and the frame its label is
// centred from: the group around a box that the arrow leaves, so that the
// labels of arrows crossing the same gap are level.
type node struct{ outer, inner, frame rect }

func (d *diagram) find(id string) *node {
	for _, b := range d.boxes {
		if b.id == id {
			return &node{outer: b.r, inner: b.r, frame: b.r}
		}
	}
	for _, g := range d.groups {
		if g.id == id {
			return &node{outer: g.r, inner: g.inner, frame: g.r}
		}
	}
	return nil
}

// ends is an arrow's two nodes, each framed by the group around it that does
// not hold the other end.
func (d *diagram) ends(a *arrow) (from, to *node) {
	from, to = d.find(a.from), d.find(a.to)
	for _, g := range d.groups {
		in := func(id string) bool {
			return id == g.id || slices.ContainsFunc(g.members, func(b *box) bool { return b.id == id })
		}
		switch {
		case in(a.from) && !in(a.to) && a.from != g.id:
			from.frame = g.r
		case in(a.to) && !in(a.from) && a.to != g.id:
			to.frame = g.r
		}
	}
	return from, to
}

// rows is the rows a box or group occupies: first and last.
func (d *diagram) rows(id string) (int, int) {
	for _, b := range d.boxes {
		if b.id == id {
			return b.row, b.row
		}
	}
	for _, g := range d.groups {
		if g.id == id {
			lo, hi := math.MaxInt, -1
			for _, m := range g.members {
				lo, hi = min(lo, m.row), max(hi, m.row)
			}
			return lo, hi
		}
	}
	return -1, -1
}

func boxHeight(b *box) float64 {
	return boxPadTop + labelLine + float64(len(b.sub))*subLine + boxPadBelow
}

func textWidth(s string, size, em float64) float64 {
	return float64(len([]rune(s))) * size * em
}

// layout places every box, group and arrow: columns share the width equally;
// a row is as tall as its tallest box; the gap between two rows leaves room
// for the frames that start or end there and the labels of the arrows that
// cross it.
func (d *diagram) layout() error {
	nrows := 0
	for _, b := range d.boxes {
		nrows = max(nrows, b.row+1)
	}
	heights := make([]float64, nrows)
	for _, b := range d.boxes {
		heights[b.row] = max(heights[b.row], boxHeight(b))
	}
	// gaps[r] is the space above row r.
	gaps := make([]float64, nrows+1)
	for r := range gaps {
		gaps[r] = rowGap
		if r == 0 || r == nrows {
			gaps[r] = margin
		}
	}
	for _, a := range d.arrows {
		fromFirst, fromLast := d.rows(a.from)
		toFirst, toLast := d.rows(a.to)
		need := float64(len(a.label))*arrowLine + 28
		switch {
		case toFirst == fromLast+1: // downwards across one gap
			gaps[toFirst] = max(gaps[toFirst], need)
		case fromFirst == toLast+1: // upwards
			gaps[fromFirst] = max(gaps[fromFirst], need)
		}
	}
	for _, g := range d.groups {
		first, last := d.rows(g.id)
		gaps[first] += groupTop
		gaps[last+1] += groupPad
	}
	ys := make([]float64, nrows)
	y := 0.0
	for r := range nrows {
		y += gaps[r]
		ys[r] = y
		y += heights[r]
	}
	d.height = math.Round(y + gaps[nrows])

	colW := (float64(d.width) - 2*margin - float64(d.columns-1)*colGap) / float64(d.columns)
	for _, b := range d.boxes {
		b.r = rect{
			x: margin + float64(b.col)*(colW+colGap),
			y: ys[b.row],
			w: float64(b.span)*colW + float64(b.span-1)*colGap,
			h: heights[b.row],
		}
		room := b.r.w - 2*boxPadSide
		if w := textWidth(b.label, labelSize, boldEm); w > room {
			return fmt.Errorf("line %d: box %q: its label %q is about %.0fpx wide, its box %.0fpx: widen the box or shorten the label", b.line, b.id, b.label, w, room)
		}
		for _, s := range b.sub {
			if w := textWidth(s, subSize, plainEm); w > room {
				return fmt.Errorf("line %d: box %q: the line %q is about %.0fpx wide, its box %.0fpx: widen the box or split the line", b.line, b.id, s, w, room)
			}
		}
	}
	for _, g := range d.groups {
		in := g.members[0].r
		for _, m := range g.members[1:] {
			x0, y0 := min(in.x, m.r.x), min(in.y, m.r.y)
			x1, y1 := max(in.right(), m.r.right()), max(in.bottom(), m.r.bottom())
			in = rect{x0, y0, x1 - x0, y1 - y0}
		}
		g.inner = in
		g.r = rect{in.x - groupPad, in.y - groupTop, in.w + 2*groupPad, in.h + groupTop + groupPad}
		if g.r.x < 0 || g.r.right() > float64(d.width) {
			return fmt.Errorf("line %d: group %q: its frame runs off the canvas", g.line, g.id)
		}
	}
	return nil
}

// route is an arrow's polyline and where its label goes.
func route(a *arrow, from, to *node) (pts [][2]float64, lx, ly float64) {
	f, t := from.outer, to.outer
	fi, ti := from.inner, to.inner
	xlo, xhi := max(fi.x, ti.x), min(fi.right(), ti.right())
	ylo, yhi := max(fi.y, ti.y), min(fi.bottom(), ti.bottom())
	switch {
	case xlo < xhi && (f.bottom() <= t.y || t.bottom() <= f.y): // one above the other
		x := xlo + a.at*(xhi-xlo)
		y0, y1 := f.bottom(), t.y
		if t.bottom() <= f.y {
			y0, y1 = f.y, t.bottom()
		}
		ly := (from.frame.bottom() + to.frame.y) / 2
		if t.bottom() <= f.y {
			ly = (from.frame.y + to.frame.bottom()) / 2
		}
		return [][2]float64{{x, y0}, {x, y1}}, x, ly
	case ylo < yhi && (f.right() <= t.x || t.right() <= f.x): // side by side
		y := ylo + a.at*(yhi-ylo)
		x0, x1 := f.right(), t.x
		if t.right() <= f.x {
			x0, x1 = f.x, t.right()
		}
		lx := (from.frame.right() + to.frame.x) / 2
		if t.right() <= f.x {
			lx = (from.frame.x + to.frame.right()) / 2
		}
		return [][2]float64{{x0, y}, {x1, y}}, lx, y - arrowLine
	default: // an elbow: down or up from the source, then across into the target's side
		x := fi.x + a.at*fi.w
		y0 := f.bottom()
		if t.cy() < f.y {
			y0 = f.y
		}
		y := ti.y + a.at*ti.h
		x1 := t.x
		if t.right() <= x {
			x1 = t.right()
		}
		return [][2]float64{{x, y0}, {x, y}, {x1, y}}, x, (y0 + y) / 2
	}
}

// num formats a coordinate with at most one decimal.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return xmlEscaper.Replace(s) }

// render writes the laid-out diagram as SVG.
func (d *diagram) render(w io.Writer) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
		`<!-- Generated by scripts/diagram from docs/architecture.txt: edit that and run make diagram. -->` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%s" viewBox="0 0 %d %s" role="img" aria-labelledby="title">`+"\n",
		d.width, num(d.height), d.width, num(d.height))
	p("<title id=\"title\">%s</title>\n", esc(d.title))
	p(`<style>
text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", "Liberation Sans", sans-serif; }
.label { font-size: %spx; font-weight: 600; fill: #1f2937; }
.sub { font-size: %spx; fill: #4b5563; }
.group { font-size: %spx; font-weight: 600; fill: #374151; }
.arrow { font-size: %spx; fill: #374151; }
</style>
<defs>
<marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">
<path d="M0,0 L10,5 L0,10 z" fill="#4b5563"/>
</marker>
</defs>
`, num(labelSize), num(subSize), num(subSize), num(arrowSize))
	p(`<rect x="0" y="0" width="%d" height="%s" rx="8" fill="#ffffff"/>`+"\n", d.width, num(d.height))

	for _, g := range d.groups {
		p(`<rect x="%s" y="%s" width="%s" height="%s" rx="10" fill="#fafafa" stroke="#9ca3af" stroke-width="1.2" stroke-dasharray="6 4"/>`+"\n",
			num(g.r.x), num(g.r.y), num(g.r.w), num(g.r.h))
		p(`<text class="group" x="%s" y="%s">%s</text>`+"\n", num(g.r.x+groupPad), num(g.r.y+18), esc(g.label))
	}
	for _, bx := range d.boxes {
		c := palette[bx.colour]
		p(`<rect x="%s" y="%s" width="%s" height="%s" rx="8" fill="%s" stroke="%s" stroke-width="1.5"/>`+"\n",
			num(bx.r.x), num(bx.r.y), num(bx.r.w), num(bx.r.h), c[0], c[1])
		// The text block (label and sublabel) is centred vertically in the box.
		text := labelLine + float64(len(bx.sub))*subLine
		y := bx.r.y + (bx.r.h-text)/2 + labelSize
		p(`<text class="label" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(bx.r.cx()), num(y), esc(bx.label))
		y += labelLine - labelSize + subSize
		for _, s := range bx.sub {
			p(`<text class="sub" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(bx.r.cx()), num(y+1), esc(s))
			y += subLine
		}
	}
	// The arrows over the frames and boxes, their labels over the arrows.
	var labels strings.Builder
	for _, a := range d.arrows {
		from, to := d.ends(a)
		pts, lx, ly := route(a, from, to)
		var path strings.Builder
		for i, pt := range pts {
			if i == 0 {
				path.WriteString("M")
			} else {
				path.WriteString(" L")
			}
			path.WriteString(num(pt[0]) + "," + num(pt[1]))
		}
		dash := ""
		if a.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		p(`<path d="%s" fill="none" stroke="#4b5563" stroke-width="1.5"%s marker-end="url(#head)"/>`+"\n", path.String(), dash)
		if len(a.label) == 0 {
			continue
		}
		wmax := 0.0
		for _, l := range a.label {
			wmax = max(wmax, textWidth(l, arrowSize, plainEm))
		}
		h := float64(len(a.label)) * arrowLine
		fmt.Fprintf(&labels, `<rect x="%s" y="%s" width="%s" height="%s" rx="4" fill="#ffffff" fill-opacity="0.92"/>`+"\n",
			num(lx-wmax/2-5), num(ly-h/2-3), num(wmax+10), num(h+6))
		y := ly - h/2 + arrowSize
		for _, l := range a.label {
			fmt.Fprintf(&labels, `<text class="arrow" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(lx), num(y), esc(l))
			y += arrowLine
		}
	}
	b.WriteString(labels.String())
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// build parses a source and renders it.
func build(src io.Reader, out io.Writer) error {
	d, err := parse(src)
	if err != nil {
		return err
	}
	if err := d.layout(); err != nil {
		return err
	}
	return d.render(out)
}

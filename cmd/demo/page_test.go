package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/orders"

	"github.com/stockguard/stockguard/pkg/client"
)

// fixtureRounds are recorded-looking rounds: unsafe sells 100 units 30 times
// over, the default sells them in the first second and stops at zero, refusing
// every order after.
func fixtureRounds() []roundSeries {
	rounds := []roundSeries{{Strategy: "unsafe"}, {Strategy: "lock-batch"}}
	rounds[0].Result.Accepted, rounds[0].Result.Oversold = 1500, 3000
	rounds[0].Result.Audit.Stocked, rounds[0].Result.Audit.ServerSold = 100, 3100
	rounds[1].Result.Accepted = 50
	rounds[1].Result.Audit.Stocked, rounds[1].Result.Audit.ServerSold = 100, 100
	for i := range 50 {
		t := float64(i) / 10
		rounds[0].Left = append(rounds[0].Left, point{t, 100 - 620*t})
		rounds[1].Left = append(rounds[1].Left, point{t, max(0, 100-110*t)})
	}
	for i := 1; i < 50; i++ {
		t := float64(i) / 10
		jitter := float64(i % 7)
		rounds[0].Answers.Created = append(rounds[0].Answers.Created, point{t, 450 + jitter})
		rounds[0].Answers.Refused = append(rounds[0].Answers.Refused, point{t, 0})
		rounds[0].Answers.Other = append(rounds[0].Answers.Other, point{t, 0})
		sold := 0.0
		if t < 1 {
			sold = 60
		}
		rounds[1].Answers.Created = append(rounds[1].Answers.Created, point{t, sold + jitter})
		rounds[1].Answers.Refused = append(rounds[1].Answers.Refused, point{t, 1900 - sold + jitter})
		rounds[1].Answers.Other = append(rounds[1].Answers.Other, point{t, 0})
	}
	rounds[0].Events = fixtureEvents("unsafe", true, unsafeSale, 100, 1500)
	rounds[1].Events = fixtureEvents("lock-batch", false, sale, 100, 50)
	for r := range rounds {
		for k := range 3 {
			var lat []point
			for i := 1; i < 50; i++ {
				lat = append(lat, point{float64(i) / 10, float64(300/(r+1)+10*k) + float64(i%5)})
			}
			rounds[r].Latency = append(rounds[r].Latency, lat)
		}
	}
	return rounds
}

// fixtureCarts is a recorded-looking carts round: 20 units held in the rush,
// 6 sold, 13 back from abandoned carts at 3.3 s and sold again.
func fixtureCarts() *cartResult {
	c := &cartResult{Stocked: 20, Holds: 23, Held: 36, Sold: 20, Expired: 13, Resold: 13, Released: 3, Consistent: true}
	for i := range 90 {
		t := float64(i) / 20
		var avail, held, sold float64
		switch {
		case t < 0.2:
			held, sold = 20, 0
		case t < 3.3:
			held, sold = 14, 6
		case t < 3.5:
			avail, held, sold = 14, 0, 6
		default:
			sold = 20
		}
		c.Stock.Available = append(c.Stock.Available, point{t, avail})
		c.Stock.Held = append(c.Stock.Held, point{t, held})
		c.Stock.Sold = append(c.Stock.Sold, point{t, sold})
		if t >= 0.25 {
			c.Answers.Created = append(c.Answers.Created, point{t, max(0, 90-80*t)})
			c.Answers.Refused = append(c.Answers.Refused, point{t, max(0, 1000-900*t)})
			c.Answers.Other = append(c.Answers.Other, point{t, 0})
		}
	}
	c.Events = fixtureEvents(cartsRound, false, cartSale, 20, 20)
	return c
}

// fixtureEvents is a round's events as the demo reads them from the feed, of
// a SKU sold by sell.
func fixtureEvents(round string, unsafe bool, sell func(string, int64, int) ([]orders.Event, orders.Levels),
	stock int64, orderCount int) *eventReport {
	sku := "demo-" + round + "-0"
	served, counters := sell(sku, stock, orderCount)
	evs := clientEvents(feedOf(served...))
	r := eventReport{Round: round, Unsafe: unsafe, Events: len(evs), CaughtUp: true,
		SKUs:  []skuEvents{checkSKU(sku, evs, clientLevels(counters))},
		First: evs[:eventsShown], Last: evs[len(evs)-eventsShown:]}
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.Type]++
	}
	for _, t := range orders.EventTypes {
		if counts[string(t)] > 0 {
			r.Types = append(r.Types, typeCount{string(t), counts[string(t)]})
		}
	}
	return &r
}

var fixtureCartOptions = cartOptions{stock: 20, shoppers: 300, ttl: 3 * time.Second, sweep: 200 * time.Millisecond}

var demoOptions = options{lock: "redis", replicas: 3, stock: 100, vus: 64, duration: 5 * time.Second}

// The page of recorded rounds, opened in headless Chromium: the screenshot is
// the window's size, not blank, and both halves drew their stock and replica
// lines; only the unsafe half has the band below zero.
func TestPageScreenshot(t *testing.T) {
	page := filepath.Join(t.TempDir(), "demo.html")
	if err := writePage(page, fixtureRounds(), fixtureCarts(), demoOptions, fixtureCartOptions); err != nil {
		t.Fatal(err)
	}
	shot := screenshot(t, page)
	checkScreenshot(t, shot)
	keepScreenshot(t, shot, os.Getenv("STOCKGUARD_DEMO_SCREENSHOT"))
}

// The page holds what the browser needs and nothing from the network.
func TestPageSelfContained(t *testing.T) {
	page := filepath.Join(t.TempDir(), "demo.html")
	if err := writePage(page, fixtureRounds(), fixtureCarts(), demoOptions, fixtureCartOptions); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	html := string(b)
	for _, bad := range []string{"<script", "http://", "https://", "<link", "@import", "src="} {
		if bad == "http://" {
			html = strings.ReplaceAll(html, `xmlns="http://www.w3.org/2000/svg"`, "") // a name, not a fetch
		}
		if strings.Contains(html, bad) {
			t.Errorf("the page has %q: it must open with no network", bad)
		}
	}
	checkPageData(t, b, 3)
}

var (
	sectionRe = regexp.MustCompile(`(?s)<section class="round" data-strategy="([^"]+)">(.*?)</section>`)
	leftRe    = regexp.MustCompile(`<svg class="chart" data-kind="left" data-min="([^"]+)"`)
	seriesRe  = regexp.MustCompile(`<svg class="chart" data-kind="(latency)"(?s:.*?)</svg>`)
	pointsRe  = regexp.MustCompile(`class="series" data-name="([^"]+)"[^>]*points="([^"]*)"`)
)

// checkPageData checks the page's two rounds side by side: unsafe's stock went
// below zero, the other's never did, and every replica has a line of several
// points in the latency chart.
func checkPageData(t *testing.T, page []byte, replicas int) {
	t.Helper()
	sections := sectionRe.FindAllStringSubmatch(string(page), -1)
	if len(sections) != 2 || sections[0][1] != "unsafe" {
		t.Fatalf("want the unsafe round then the default side by side, got %d rounds", len(sections))
	}
	for _, s := range sections {
		strategy, body := s[1], s[2]
		m := leftRe.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("%s: no stock chart", strategy)
		}
		low, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("%s: stock chart's minimum %q: %v", strategy, m[1], err)
		}
		if strategy == "unsafe" && low >= 0 {
			t.Errorf("unsafe: the stock left never went below zero (lowest %g)", low)
		}
		if strategy != "unsafe" && low < 0 {
			t.Errorf("%s: the stock left went below zero (%g)", strategy, low)
		}
		charts := seriesRe.FindAllStringSubmatch(body, -1)
		if len(charts) != 1 {
			t.Fatalf("%s: %d latency charts, want 1", strategy, len(charts))
		}
		for _, c := range charts {
			lines := pointsRe.FindAllStringSubmatch(c[0], -1)
			if len(lines) != replicas {
				t.Errorf("%s %s: %d lines, want one per replica (%d)", strategy, c[1], len(lines), replicas)
			}
			for _, l := range lines {
				if n := len(strings.Fields(l[2])); n < 3 {
					t.Errorf("%s %s %s: %d points", strategy, c[1], l[1], n)
				}
			}
		}
	}
}

const shotW, shotH = 1400, 1320 // the whole page: both rounds, then the carts round

// screenshot opens page in headless Chromium and returns the PNG's path, in a
// folder of the test's own. Without chromium it skips, or fails under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func screenshot(t *testing.T, page string) string {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" {
			t.Fatal("chromium is not on the PATH (Debian's chromium package) and STOCKGUARD_TEST_REQUIRE_REAL=1")
		}
		t.Skip("no chromium on the PATH (Debian's chromium package): the page is not screenshot")
	}
	dir := t.TempDir()
	shot := filepath.Join(dir, "demo.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	abs, err := filepath.Abs(page)
	if err != nil {
		t.Fatal(err)
	}
	// A profile of its own: other Chromiums on the machine hold theirs locked.
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--force-device-scale-factor=1", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--screenshot="+shot, "--window-size="+strconv.Itoa(shotW)+","+strconv.Itoa(shotH), pageLink(abs))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	return shot
}

// checkScreenshot checks that the charts drew: the right size, mostly but not
// all white, the stock line and the first replica's colour in both halves, the
// sales, refusals and carts lines, and the oversold band in the left (unsafe)
// half only.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != shotW || b.Dy() != shotH {
		t.Fatalf("screenshot %dx%d, want %dx%d", b.Dx(), b.Dy(), shotW, shotH)
	}
	half := shotW / 2
	count := func(x0, x1 int, colour string) int {
		want := rgb(t, colour)
		n := 0
		for y := range shotH {
			for x := x0; x < x1; x++ {
				if near(img, x, y, want) {
					n++
				}
			}
		}
		return n
	}
	white := count(0, shotW, "#ffffff")
	if nonWhite := shotW*shotH - white; nonWhite < shotW*shotH/50 {
		t.Errorf("the screenshot is nearly blank: %d pixels not white", nonWhite)
	}
	for _, side := range []struct {
		name   string
		x0, x1 int
	}{{"left (unsafe)", 0, half}, {"right (default)", half, shotW}} {
		// Replica 1's latency line is drawn first: replicas 2 and 3, drawn over
		// it, cover it wherever their latencies agree, so only a few dozen of
		// its pixels may show (173 in one CI run). One that did not draw has
		// none, bar a stray anti-aliased pixel.
		for _, c := range []struct {
			what, colour string
			least        int
		}{{"stock left", colourLeft, 200}, {"replica 1", replicaColours[0], 40}} {
			if n := count(side.x0, side.x1, c.colour); n < c.least {
				t.Errorf("%s half: %d pixels of the %s line (%s); the chart did not draw", side.name, n, c.what, c.colour)
			}
		}
	}
	for _, c := range []struct{ what, colour string }{{"sales", colourCreated}, {"refusals", colourRefused},
		{"carts' available units", colourAvail}, {"carts' held units", colourHeld}} {
		if n := count(0, shotW, c.colour); n < 200 {
			t.Errorf("%d pixels of the %s line (%s); the chart did not draw", n, c.what, c.colour)
		}
	}
	if n := count(0, half, colourBelow); n < 2000 {
		t.Errorf("unsafe half: %d pixels of the band below zero, want it drawn", n)
	}
	// A band is a rectangle the plot's width (566 px) by at least a pixel or so;
	// a few pixels of its colour are the anti-aliased edges of the orange and
	// pink replica lines over white (one was seen in CI), not a band. The page's
	// data (checkPageData) says exactly whether the stock went below zero.
	if n := count(half, shotW, colourBelow); n >= 200 {
		t.Errorf("default half: %d pixels of the band below zero, want none (a few stray anti-aliased ones at most)", n)
	}
}

func rgb(t *testing.T, hex string) [3]uint8 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil || len(hex) != 7 {
		t.Fatalf("colour %q", hex)
	}
	return [3]uint8{uint8(v >> 16), uint8(v >> 8), uint8(v)}
}

// near is a pixel within a few levels of want: the browser's colour handling
// may round.
func near(img image.Image, x, y int, want [3]uint8) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	d := func(got uint32, w uint8) bool { return absDiff(int(got>>8), int(w)) <= 6 }
	return d(r, want[0]) && d(g, want[1]) && d(b, want[2])
}

func absDiff(a, b int) int {
	if a > b {
		return a - b
	}
	return b - a
}

// keepScreenshot copies the screenshot to dst when dst is set (for a note
// about the run); the test's own copy goes with its temporary folder.
func keepScreenshot(t *testing.T, shot, dst string) {
	t.Helper()
	if dst == "" {
		return
	}
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot kept at %s", dst)
}

// The page tells the whole story: the two rounds, then the carts round with
// its chart; sales and refusals apart; round tick values; a line under each
// chart's title saying what it shows.
func TestPageTellsEveryRound(t *testing.T) {
	page := filepath.Join(t.TempDir(), "demo.html")
	if err := writePage(page, fixtureRounds(), fixtureCarts(), demoOptions, fixtureCartOptions); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	checkPage(t, b, 3)
}

// checkPage checks everything the page must show.
func checkPage(t *testing.T, page []byte, replicas int) {
	t.Helper()
	checkPageData(t, page, replicas)
	checkCartsData(t, page)
	checkAnswers(t, page)
	checkTicks(t, page)
	checkExplained(t, page)
	checkEvents(t, page)
}

var (
	eventsRe     = regexp.MustCompile(`(?s)<section class="events">(.*?)</section>`)
	eventRoundRe = regexp.MustCompile(`(?s)<div class="event-round" data-round="([^"]+)" data-ok="([^"]+)" data-events="(\d+)">(.*?)</div>`)
	typeCountRe  = regexp.MustCompile(`<td data-type="([^"]+)">(\d+)</td>`)
	skuRowRe     = regexp.MustCompile(`<tr data-sku="([^"]+)" data-matches="([^"]+)" data-gaps="(\d+)" data-stale="(\d+)">`)
	eventRowRe   = regexp.MustCompile(`<tr class="event">`)
)

// checkEvents checks the page's section of the rounds' stock events: one part
// per round, in order; the counts by type adding up to the round's events;
// each SKU's check; the first and last events. The guarded rounds' events
// rebuild their SKU's counters with no gap; the unsafe round's are described
// as what they are.
func checkEvents(t *testing.T, page []byte) {
	t.Helper()
	m := eventsRe.FindSubmatch(page)
	if m == nil {
		t.Errorf("the page has no section of the rounds' events (<section class=\"events\">)")
		return
	}
	parts := eventRoundRe.FindAllSubmatch(m[1], -1)
	var names []string
	for _, p := range parts {
		names = append(names, string(p[1]))
	}
	if strings.Join(names, " ") != "unsafe "+string(orders.DefaultStrategy)+" "+cartsRound {
		t.Fatalf("the events of rounds %v, want unsafe, %s and carts", names, orders.DefaultStrategy)
	}
	for _, p := range parts {
		round, ok, body := string(p[1]), string(p[2]), string(p[4])
		total, _ := strconv.Atoi(string(p[3]))
		sum := 0
		for _, c := range typeCountRe.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.Atoi(c[2])
			sum += n
		}
		if total == 0 || sum != total {
			t.Errorf("%s: %d events, %d in the counts by type", round, total, sum)
		}
		want := []string{"order.placed"} // the rounds sell; the carts round holds, and its holds expire
		if round == cartsRound {
			want = []string{"reservation.created", "reservation.confirmed", "reservation.expired"}
		}
		for _, w := range want {
			if !strings.Contains(body, `<td data-type="`+w+`">`) {
				t.Errorf("%s: no %s event counted", round, w)
			}
		}
		skus := skuRowRe.FindAllStringSubmatch(body, -1)
		if len(skus) != 1 {
			t.Errorf("%s: %d SKU rows, want the round's one SKU", round, len(skus))
		}
		for _, s := range skus {
			if s[3] != "0" {
				t.Errorf("%s: SKU %s has %s seqs missing", round, s[1], s[3])
			}
			if round == "unsafe" {
				continue
			}
			if ok != "true" || s[2] != "true" || s[4] != "0" {
				t.Errorf("%s: SKU %s: check ok %s, rebuilt = counters %s, %s stale counters; want true, true, 0", round, s[1], ok, s[2], s[4])
			}
		}
		if n := len(eventRowRe.FindAllString(body, -1)); n < 2 || n > 2*eventsShown {
			t.Errorf("%s: %d events shown, want the first and last few", round, n)
		}
		if ref := map[bool]string{true: ">hold ", false: ">order "}[round == cartsRound]; !strings.Contains(body, ref) {
			t.Errorf("%s: the events shown name no %s", round, strings.Trim(ref, "> "))
		}
		if round == "unsafe" && !strings.Contains(body, "The unsafe strategy writes events too") {
			t.Errorf("unsafe: the page does not say what its events are")
		}
	}
}

var (
	cartsRe   = regexp.MustCompile(`(?s)<section class="carts"[^>]*>(.*?)</section>`)
	chartRe   = regexp.MustCompile(`(?s)<svg class="chart" data-kind="([^"]+)"(.*?)</svg>`)
	yTickRe   = regexp.MustCompile(`<text [^>]*text-anchor="end"[^>]*>(-?[0-9][^<]*)</text>`)
	xTickRe   = regexp.MustCompile(`<text [^>]*text-anchor="middle"[^>]*>(-?[0-9][^<]*)s</text>`)
	explainRe = regexp.MustCompile(`(?s)<p class="explain">([^<]*)</p>\s*<svg class="chart" data-kind="([^"]+)"`)
	maxRe     = regexp.MustCompile(`class="series" data-name="([^"]+)" data-max="([^"]+)"`)
)

// checkCartsData checks the carts round's section: its chart of the SKU's
// units (available, held, sold) and of the answers to holds, each line drawn.
func checkCartsData(t *testing.T, page []byte) {
	t.Helper()
	m := cartsRe.FindSubmatch(page)
	if m == nil {
		t.Errorf("the page has no carts round (no <section class=\"carts\">)")
		return
	}
	want := map[string][]string{"carts-stock": {"available", "held", "sold"}, "carts-answers": {"201 held", "409 refused"}}
	for _, c := range chartRe.FindAllSubmatch(m[1], -1) {
		names := want[string(c[1])]
		delete(want, string(c[1]))
		got := map[string]int{}
		for _, l := range pointsRe.FindAllSubmatch(c[0], -1) {
			got[string(l[1])] = len(strings.Fields(string(l[2])))
		}
		for _, n := range names {
			if got[n] < 3 {
				t.Errorf("carts chart %s: line %q has %d points, want several", c[1], n, got[n])
			}
		}
	}
	for kind := range want {
		t.Errorf("the carts round has no %s chart", kind)
	}
}

// checkAnswers checks that each round's answers chart draws sales (201) and
// refusals (409) as lines of their own, and that the default round, which
// sells out early, shows refusals.
func checkAnswers(t *testing.T, page []byte) {
	t.Helper()
	for _, s := range sectionRe.FindAllStringSubmatch(string(page), -1) {
		strategy, body := s[1], s[2]
		var answers string
		for _, c := range chartRe.FindAllStringSubmatch(body, -1) {
			if c[1] == "answers" {
				answers = c[0]
			}
		}
		if answers == "" {
			t.Errorf("%s: no chart of the answers (sales and refusals apart)", strategy)
			continue
		}
		peak := map[string]float64{}
		for _, m := range maxRe.FindAllStringSubmatch(answers, -1) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("%s: series %s: data-max %q", strategy, m[1], m[2])
			}
			peak[strings.Fields(m[1])[0]] = v
		}
		if _, ok := peak["201"]; !ok {
			t.Errorf("%s: no line of sales (201) in the answers chart", strategy)
		}
		if _, ok := peak["409"]; !ok {
			t.Errorf("%s: no line of refusals (409) in the answers chart", strategy)
		}
		if strategy != "unsafe" && peak["409"] <= 0 {
			t.Errorf("%s: the round sold out, yet its refusals line never rises above 0", strategy)
		}
	}
}

// checkTicks checks every chart's tick values, up and across: at least
// three, evenly spaced by a nice step (1, 2 or 5 × 10^k), each a multiple of
// it, and zero among them when the range crosses it.
func checkTicks(t *testing.T, page []byte) {
	t.Helper()
	charts := chartRe.FindAllStringSubmatch(string(page), -1)
	if len(charts) == 0 {
		t.Fatal("no charts")
	}
	for i, c := range charts {
		for _, axis := range []struct {
			name string
			re   *regexp.Regexp
		}{{"y", yTickRe}, {"x", xTickRe}} {
			var vs []float64
			for _, m := range axis.re.FindAllStringSubmatch(c[0], -1) {
				v, err := strconv.ParseFloat(m[1], 64)
				if err != nil {
					t.Fatalf("chart %d (%s): %s tick label %q: %v", i, c[1], axis.name, m[1], err)
				}
				vs = append(vs, v)
			}
			if err := niceSequence(vs); err != "" {
				t.Errorf("chart %d (%s), %s ticks %v: %s", i, c[1], axis.name, vs, err)
			}
		}
	}
}

// niceSequence says what is wrong with ticks, or "".
func niceSequence(vs []float64) string {
	if len(vs) < 3 {
		return "fewer than 3 ticks"
	}
	step := math.Abs(vs[1] - vs[0])
	if !isNiceStep(step) {
		return fmt.Sprintf("step %g is not 1, 2 or 5 × 10^k", step)
	}
	lo, hi := math.Min(vs[0], vs[len(vs)-1]), math.Max(vs[0], vs[len(vs)-1])
	zero := false
	for i, v := range vs {
		if i > 0 && math.Abs(math.Abs(v-vs[i-1])-step) > step*1e-6 {
			return fmt.Sprintf("uneven: %g then %g", vs[i-1], v)
		}
		if q := v / step; math.Abs(q-math.Round(q)) > 1e-6 {
			return fmt.Sprintf("%g is not a multiple of the step %g", v, step)
		}
		zero = zero || v == 0
	}
	if lo < 0 && hi > 0 && !zero {
		return "the range crosses zero but no tick is 0"
	}
	return ""
}

func isNiceStep(step float64) bool {
	if step <= 0 || math.IsInf(step, 0) || math.IsNaN(step) {
		return false
	}
	m := step / math.Pow(10, math.Floor(math.Log10(step)))
	for _, nice := range []float64{1, 2, 5, 10} {
		if math.Abs(m-nice) < 1e-6 {
			return true
		}
	}
	return false
}

// checkExplained checks that a line of explanation comes right before each
// chart, and that the page says what a VU is.
func checkExplained(t *testing.T, page []byte) {
	t.Helper()
	charts := chartRe.FindAllSubmatch(page, -1)
	explained := explainRe.FindAllSubmatch(page, -1)
	if len(explained) != len(charts) {
		t.Errorf("%d charts, %d of them with a line of explanation", len(charts), len(explained))
	}
	for _, e := range explained {
		if len(strings.TrimSpace(string(e[1]))) < 40 {
			t.Errorf("chart %s: explanation %q says too little", e[2], e[1])
		}
	}
	if !strings.Contains(string(page), "VU") || !strings.Contains(string(page), "virtual user") {
		t.Errorf("the page does not say what a VU (virtual user) is")
	}
}

// niceTicks gives round ticks over every kind of range: small and large,
// fractional, negative, crossing zero, empty; each covers its range, a nice
// step apart, with 0 among them when the range crosses it.
func TestNiceTicks(t *testing.T) {
	ranges := [][2]float64{{0, 1}, {0, 100}, {0, 3}, {0, 5.3}, {0, 17}, {-5025, 100}, {-1455, 3298}, {463, 3298},
		{-0.37, 0.81}, {0, 0.004}, {-1e6, 3}, {0, 2843}, {0, 104}, {-2938, 100}, {7, 7}, {0, 0}, {-3, -1},
		{0.1, 0.3}, {-12.5, 12.5}, {1e-7, 3e-7}, {99, 101}}
	for lo := -1000.0; lo <= 1000; lo += 137 { // and many more
		for span := 0.013; span < 1e5; span *= 3.7 {
			ranges = append(ranges, [2]float64{lo, lo + span})
		}
	}
	for _, r := range ranges {
		ticks := niceTicks(r[0], r[1], yTicksWanted)
		if err := niceSequence(ticks); err != "" {
			t.Errorf("niceTicks(%g, %g) = %v: %s", r[0], r[1], ticks, err)
			continue
		}
		if ticks[0] > r[0] || ticks[len(ticks)-1] < r[1] || len(ticks) > 2*yTicksWanted {
			t.Errorf("niceTicks(%g, %g) = %v: want at most %d ticks covering the range", r[0], r[1], ticks, 2*yTicksWanted)
		}
		if r[0] < 0 && r[1] > 0 && !slices.Contains(ticks, 0) {
			t.Errorf("niceTicks(%g, %g) = %v: no zero line", r[0], r[1], ticks)
		}
		step := ticks[1] - ticks[0]
		for _, v := range ticks {
			// The label is the tick's value, written without a minus on zero.
			if l := tickLabel(v, step); math.Abs(mustParse(t, l)-v) > step*1e-6 || strings.HasPrefix(l, "-") && v == 0 {
				t.Errorf("niceTicks(%g, %g): tick %g labelled %q", r[0], r[1], v, l)
			}
		}
	}
}

func mustParse(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// clientEvents are the service's events as the client reads them off the wire.
func clientEvents(evs []orders.Event) []client.Event {
	b, err := json.Marshal(evs)
	if err != nil {
		panic(err)
	}
	var out []client.Event
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"

	mrand "math/rand/v2"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// Stock in several locations (Workload.Locations > 1): setup makes the
// locations (POST /v1/locations) and spreads each SKU's stock over them
// (POST /v1/skus/{sku}/locations/{location}/restock); order lines name a
// location (Named), refuse a split (Unsplit) or leave it to the service; each
// 201 is checked to have taken its units as its lines asked; the audit reads
// every SKU's counts per location (GET /v1/skus/{sku}) and the service's own
// audit of them (GET /v1/audit).

// defaultLocation is the location every deployment has.
const defaultLocation = "default"

// locationIDs are the ids of a run's n locations, in the order allocation
// prefers them: the default (priority 0), then loadtest-2 ... loadtest-n.
func locationIDs(n int) []string {
	ids := []string{defaultLocation}
	for i := 2; i <= n; i++ {
		ids = append(ids, "loadtest-"+strconv.Itoa(i))
	}
	return ids
}

// locationPriority is the priority setup gives the location of id
// loadtest-<i>: 10 × (i-1), after the default's 0.
func locationPriority(i int) int { return 10 * (i - 1) }

// spread is how setup places a SKU's stock over n locations (in
// locationIDs' order). The SKUs of odd index have it in equal parts (the
// remainder in the last location); those of even index, the hot SKU
// (<prefix>-0) among them, have only maxQuantity-1 units in the default
// location, which allocation takes first, and the rest in equal parts in the
// others: a line that asks for more than that finds the default short, and
// is split (or, unsplit, taken whole from another location).
func spread(stock, n, index, maxQuantity int) []int {
	out := make([]int, n)
	if n == 1 {
		out[0] = stock
		return out
	}
	from := 0
	if index%2 == 0 {
		out[0] = min(stock, maxQuantity-1)
		from = 1
	}
	left := stock - out[0]
	each := left / (n - from)
	for i := from; i < n; i++ {
		out[i] = each
	}
	out[n-1] += left - each*(n-from)
	return out
}

// makeLocations makes the locations of ids but the default, with their
// priorities: 201 made, 409 there already (from an earlier run: they are the
// same for every run). A service without the route (404) is told nothing:
// the locations must then exist already, and seeding a location that does
// not fails, naming it.
func makeLocations(ctx context.Context, c *client, ids []string, log *slog.Logger) error {
	if c.apiErr != nil {
		return fmt.Errorf("setup: %w", c.apiErr)
	}
	for i, id := range ids {
		if id == defaultLocation {
			continue
		}
		_, err := c.api.CreateLocation(ctx, sgclient.LocationRequest{ID: id, Name: fmt.Sprintf("Load test %d", i+1), Priority: int64(locationPriority(i + 1))})
		var p *sgclient.Problem
		switch {
		case err == nil || sgclient.IsLocationExists(err):
		case errors.As(err, &p) && (p.Status == http.StatusNotFound || p.Status == http.StatusMethodNotAllowed):
			log.Warn("the service cannot make locations (POST /v1/locations answers "+strconv.Itoa(p.Status)+"): using those it has", "location", id)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return fmt.Errorf("setup: POST /v1/locations %s: %w", id, noAnswer(c, err))
		}
	}
	return nil
}

// seedAt restocks a SKU in one location, with an Idempotency-Key.
func seedAt(ctx context.Context, c *client, sku, location string, units int) error {
	if c.apiErr != nil {
		return fmt.Errorf("setup: %w", c.apiErr)
	}
	_, err := c.api.RestockLocation(ctx, sku, location, sgclient.RestockRequest{Quantity: units})
	switch {
	case err == nil:
		return nil
	case sgclient.IsUnknownLocation(err):
		return fmt.Errorf("setup: location %s is unknown to the service: make it first (POST /v1/locations)", location)
	}
	return fmt.Errorf("setup: POST /v1/skus/%s/locations/%s/restock: %w", sku, location, noAnswer(c, err))
}

// kinds makes some of an order's lines name a location (Named) and some
// refuse a split (Unsplit); the rest stay the service's to allocate.
func (wk *worker) kinds(r *mrand.Rand, lines []item) {
	if wk.w.Named == 0 && wk.w.Unsplit == 0 {
		return
	}
	for i := range lines {
		switch x := r.Float64(); {
		case x < wk.w.Named:
			lines[i].loc = wk.locs[r.IntN(len(wk.locs))]
		case x < wk.w.Named+wk.w.Unsplit:
			lines[i].whole = true
		}
	}
}

// located reports whether a line names a location or refuses a split.
func located(lines []item) bool {
	return slices.ContainsFunc(lines, func(it item) bool { return it.loc != "" || it.whole })
}

// plainOrder is the order of lines as the service writes its items: without
// their locations and splits.
func plainOrder(lines []item) []byte {
	plain := make([]item, len(lines))
	for i, it := range lines {
		plain[i] = item{SKU: it.SKU, Quantity: it.Quantity}
	}
	return appendOrder(make([]byte, 0, 64+40*len(lines)), plain)
}

// Named check of the located orders.
const chkAllocated = "order: allocations as the lines asked (a named line from its location, an unsplit one from one)"

// allocation is one entry of a 201's allocations.
type allocation struct {
	SKU      string `json:"sku"`
	Location string `json:"location"`
	Quantity int    `json:"quantity"`
}

// checkAllocations checks a 201's allocations against the lines of SKUs that
// only one line asked for: a named line's units all from its location, an
// unsplit line's from one location, an allocated line's from one or more
// (then it was split, which it counts). The answer is read as bytes when it
// is in the service's encoding, and decoded otherwise.
func checkAllocations(answer []byte, lines []item) (pass bool, split int64) {
	if pass, split, ok := allocationsFast(answer, lines); ok {
		return pass, split
	}
	var o struct {
		Allocations []allocation `json:"allocations"`
	}
	_ = json.Unmarshal(answer, &o)
	by := map[string][]allocation{}
	for _, a := range o.Allocations {
		by[a.SKU] = append(by[a.SKU], a)
	}
	pass = true
	for _, it := range lines {
		if !single(lines, it.SKU) {
			continue
		}
		as := by[it.SKU]
		switch {
		case len(as) == 0:
			pass = false
		case it.loc != "":
			pass = pass && len(as) == 1 && as[0].Location == it.loc && as[0].Quantity == it.Quantity
		case it.whole:
			pass = pass && len(as) == 1
		case len(as) > 1:
			split++
		}
	}
	return pass, split
}

// allocationsFast is checkAllocations on the answer's bytes, as the service
// writes an allocation ({"sku":...,"location":...,"quantity":...}); false
// when a line's SKU has no such entry (another encoding, or none).
func allocationsFast(answer []byte, lines []item) (pass bool, split int64, ok bool) {
	pass = true
	var key []byte
	for _, it := range lines {
		if !single(lines, it.SKU) {
			continue
		}
		key = append(append(append(key[:0], `{"sku":"`...), it.SKU...), `","location":`...)
		n := bytes.Count(answer, key)
		switch {
		case n == 0:
			return false, 0, false
		case it.loc != "":
			key = append(append(append(append(key, '"'), it.loc...), `","quantity":`...), strconv.Itoa(it.Quantity)...)
			pass = pass && n == 1 && bytes.Contains(answer, append(key, '}'))
		case it.whole:
			pass = pass && n == 1
		case n > 1:
			split++
		}
	}
	return pass, split, true
}

// single reports whether one line only asks for sku.
func single(lines []item, sku string) bool {
	n := 0
	for _, it := range lines {
		if it.SKU == sku {
			n++
		}
	}
	return n == 1
}

// locStock is a SKU's counts in one location, as GET /v1/skus/{sku} says.
type locStock struct {
	Location  string `json:"location"`
	Available int64  `json:"available"`
	Reserved  int64  `json:"reserved"`
	Sold      int64  `json:"sold"`
	Stocked   int64  `json:"stocked"`
}

// LocationAudit is the audit's part of the locations: each run SKU's counts
// in each location, and the service's audit of them.
type LocationAudit struct {
	Locations int `json:"locations"`     // the most a scenario spread over
	SKUs      int `json:"skus_located"`  // run SKUs read with their locations
	Rows      int `json:"location_rows"` // (SKU, location) counts read
	// Oversold is what some location sold or holds beyond its stock, summed.
	Oversold int64 `json:"oversold"`
	// ServiceAudit says GET /v1/audit was read and said every run SKU
	// consistent in each location, with nothing oversold.
	ServiceAudit bool     `json:"service_audit"`
	Problems     []string `json:"problems,omitempty"`
}

// auditLocations checks every located SKU's counts per location (rows, from
// GET /v1/skus/{sku}) against what setup placed there (at), and reads GET
// /v1/audit for the service's own check of them; it returns the oversold
// units it found, per SKU the most of the SKU's and its locations'.
func auditLocations(ctx context.Context, c *client, rows map[string]skuStock, at map[string]map[string]int64, n int) *LocationAudit {
	la := &LocationAudit{Locations: n}
	skus := make([]string, 0, len(at))
	for sku := range at {
		skus = append(skus, sku)
	}
	slices.Sort(skus)
	for _, sku := range skus {
		s, ok := rows[sku]
		if !ok {
			continue // the SKU's own audit says it is missing
		}
		la.SKUs++
		la.Problems = append(la.Problems, locationProblems(s, at[sku])...)
		la.Rows += len(s.Locations)
		for _, l := range s.Locations {
			la.Oversold += max(0, l.Sold+l.Reserved-l.Stocked)
		}
	}
	la.ServiceAudit = serviceAudit(ctx, c, skus, la)
	return la
}

// locationProblems are what is wrong with one SKU's counts per location:
// a location setup stocked that is not listed, a negative count, more sold
// and held than stocked, I1 broken in a location, totals that are not the
// locations' sums, or a location's stock that is not what setup put there.
func locationProblems(s skuStock, placed map[string]int64) []string {
	var out []string
	var sum locStock
	listed := map[string]bool{}
	for _, l := range s.Locations {
		listed[l.Location] = true
		sum.Available, sum.Reserved, sum.Sold, sum.Stocked = sum.Available+l.Available, sum.Reserved+l.Reserved, sum.Sold+l.Sold, sum.Stocked+l.Stocked
		at := s.SKU + " in " + l.Location
		switch {
		case l.Available < 0 || l.Reserved < 0 || l.Sold < 0 || l.Stocked < 0:
			out = append(out, fmt.Sprintf("%s: a negative count: available %d, reserved %d, sold %d, stocked %d", at, l.Available, l.Reserved, l.Sold, l.Stocked))
		case l.Sold+l.Reserved > l.Stocked:
			out = append(out, fmt.Sprintf("%s: sold %d + reserved %d > stocked %d", at, l.Sold, l.Reserved, l.Stocked))
		case l.Stocked != l.Available+l.Reserved+l.Sold:
			out = append(out, fmt.Sprintf("%s: I1 broken: stocked %d, available %d + reserved %d + sold %d", at, l.Stocked, l.Available, l.Reserved, l.Sold))
		}
		if l.Stocked != placed[l.Location] {
			out = append(out, fmt.Sprintf("%s: stocked %d, setup placed %d", at, l.Stocked, placed[l.Location]))
		}
	}
	for loc, n := range placed {
		if n > 0 && !listed[loc] {
			out = append(out, fmt.Sprintf("%s: setup placed %d units in %s, which its locations do not list", s.SKU, n, loc))
		}
	}
	if sum.Available != s.Available || sum.Reserved != s.Reserved || sum.Sold != s.Sold || sum.Stocked != s.Stocked {
		out = append(out, fmt.Sprintf("%s: totals available %d, reserved %d, sold %d, stocked %d are not its locations' sums %d, %d, %d, %d",
			s.SKU, s.Available, s.Reserved, s.Sold, s.Stocked, sum.Available, sum.Reserved, sum.Sold, sum.Stocked))
	}
	slices.Sort(out)
	return out
}

// serviceAudit reads GET /v1/audit (every SKU the service has: once, at the
// end) and checks what it says of the run's SKUs: each listed, consistent,
// nothing oversold, with its locations. Problems go to la.
func serviceAudit(ctx context.Context, c *client, skus []string, la *LocationAudit) bool {
	var a struct {
		SKUs []struct {
			SKU        string     `json:"sku"`
			Oversold   int64      `json:"oversold"`
			Consistent bool       `json:"consistent"`
			Locations  []locStock `json:"locations"`
		} `json:"skus"`
	}
	if err := c.adminCall(ctx, http.MethodGet, "/v1/audit", "", &a); err != nil {
		la.Problems = append(la.Problems, "GET /v1/audit: "+err.Error())
		return false
	}
	ok := true
	want := map[string]bool{}
	for _, sku := range skus {
		want[sku] = true
	}
	for _, s := range a.SKUs {
		if !want[s.SKU] {
			continue
		}
		delete(want, s.SKU)
		if !s.Consistent || s.Oversold != 0 || len(s.Locations) == 0 {
			ok = false
			la.Problems = append(la.Problems, fmt.Sprintf("%s: GET /v1/audit says consistent %v, oversold %d, with %d locations",
				s.SKU, s.Consistent, s.Oversold, len(s.Locations)))
		}
	}
	if len(want) > 0 {
		ok = false
		missing := make([]string, 0, len(want))
		for sku := range want {
			missing = append(missing, sku)
		}
		slices.Sort(missing)
		la.Problems = append(la.Problems, "missing from GET /v1/audit: "+strings.Join(missing, ", "))
	}
	return ok
}

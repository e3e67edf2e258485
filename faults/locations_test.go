//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Stock in three locations (issue 41): the default one and two the tests
// make, which allocation takes first (their priority is below the default's
// 0), so that lines the service allocates split over them as they run out.
// The tests make them in the database, as POST /v1/locations does.
var (
	locations  = []string{"default", "east", "west"}
	priorities = map[string]int{"east": -2, "west": -1}
)

// addLocations makes east and west.
func (c *cluster) addLocations() {
	t := c.t
	t.Helper()
	for _, id := range locations[1:] {
		if err := c.gdb.Exec("INSERT INTO locations (id, name, priority, active, created_at) VALUES (?, ?, ?, ?, ?)",
			id, "Location "+id, priorities[id], true, time.Now().UTC()).Error; err != nil {
			t.Fatal(err)
		}
	}
}

// transfer moves q available units of sku between two locations through the
// balancer (admin); it returns the answer's status, 0 when none came.
func (c *cluster) transfer(ctx context.Context, sku, from, to string, q int) int {
	rep, err := post(ctx, c.lb.url+"/v1/skus/"+sku+"/transfers", fmt.Sprintf(`{"from":%q,"to":%q,"quantity":%d}`, from, to, q),
		map[string]string{"Authorization": "Bearer " + adminToken})
	if err != nil {
		return 0
	}
	return rep.status
}

// locate moves q units of each of skus from the default location to each of
// east and west, asking again on a 5xx or a lost answer (a transfer is
// refused, 409, only when the default location has too few: a test's bug).
func (c *cluster) locate(skus []string, q int) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sku := range skus {
		for _, to := range locations[1:] {
			status := c.transfer(ctx, sku, "default", to, q)
			for try := 0; (status == 0 || status >= 500) && try < 50 && ctx.Err() == nil; try++ {
				hold(100 * time.Millisecond) // asking again, with a deadline
				status = c.transfer(ctx, sku, "default", to, q)
			}
			if status != http.StatusOK {
				t.Fatalf("transfer of %d %s to %s: %d", q, sku, to, status)
			}
		}
	}
}

// feedLocations transfers a unit or two of sku from the default location to
// east or west every interval until ctx ends (at most n times), so that the
// load's lines, allocated east first, then west, then default, keep
// splitting over them; one transfer in four goes from east to west. It
// returns how many transfers were answered 200 and 409 (too few to move).
func (c *cluster) feedLocations(ctx context.Context, sku string, n int, interval time.Duration, seed uint64) (moved, short int) {
	rng := rand.New(rand.NewPCG(seed, 3))
	for range n {
		from, to := "default", locations[1+rng.IntN(2)]
		if rng.IntN(4) == 0 {
			from, to = "east", "west"
		}
		switch c.transfer(ctx, sku, from, to, 1+rng.IntN(2)) {
		case http.StatusOK:
			moved++
		case http.StatusConflict:
			short++
		}
		select { // the operator's own pace
		case <-ctx.Done():
			return moved, short
		case <-time.After(interval):
		}
	}
	return moved, short
}

// checkLocations checks I1 per location in the database, for every SKU
// stocked in more than the default location: each location's row holds
// stocked == available + reserved + sold with available and reserved not
// negative; the SKU's counters are its rows' sums, and it counts them; and
// each location's sold is what the live orders took there (their
// allocations; an order placed before its SKU was located, with none, took
// its units in the default location). It returns the located SKUs' units
// sold per location, and fails the test on any difference.
func (c *cluster) checkLocations(ctx context.Context) map[string]int64 {
	t := c.t
	t.Helper()
	bad := c.strings(ctx, `SELECT sku || ' at ' || location || ': stocked ' || stocked || ', available ' || available
		|| ', reserved ' || reserved || ', sold ' || sold FROM sku_locations
		WHERE stocked <> available + reserved + sold OR available < 0 OR reserved < 0 OR sold < 0`)
	if len(bad) > 0 {
		t.Errorf("I1 in a location, in the database: %s", strings.Join(bad[:min(5, len(bad))], "; "))
	}
	sums := c.strings(ctx, `SELECT s.sku || ': counters ' || s.available || '/' || s.reserved || '/' || s.sold || '/' || s.stocked
		|| ' in ' || s.locations || ' locations; its rows sum to ' || COALESCE(SUM(l.available), 0) || '/' || COALESCE(SUM(l.reserved), 0)
		|| '/' || COALESCE(SUM(l.sold), 0) || '/' || COALESCE(SUM(l.stocked), 0) || ' in ' || count(l.location)
		FROM skus s LEFT JOIN sku_locations l ON l.sku = s.sku
		GROUP BY s.sku, s.available, s.reserved, s.sold, s.stocked, s.locations
		HAVING (s.locations > 0 OR count(l.location) > 0) AND (s.locations <> count(l.location)
		   OR s.available <> SUM(l.available) OR s.reserved <> SUM(l.reserved) OR s.sold <> SUM(l.sold) OR s.stocked <> SUM(l.stocked))`)
	if len(sums) > 0 {
		t.Errorf("a SKU's counters are not its locations' sums: %s", strings.Join(sums[:min(5, len(sums))], "; "))
	}
	recount := c.strings(ctx, `WITH alloc AS (
		  SELECT a.sku, a.location, SUM(a.quantity) AS q FROM allocations a JOIN orders o ON o.id = a.owner_id
		  WHERE o.status <> 'cancelled' GROUP BY a.sku, a.location),
		unalloc AS (
		  SELECT ol.sku, SUM(ol.quantity) AS q FROM order_lines ol JOIN orders o ON o.id = ol.order_id
		  WHERE o.status <> 'cancelled' AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.owner_id = o.id AND a.sku = ol.sku)
		  GROUP BY ol.sku)
		SELECT l.sku || ' at ' || l.location || ': sold ' || l.sold || ', the live orders took ' || want.q
		FROM sku_locations l
		LEFT JOIN alloc ON alloc.sku = l.sku AND alloc.location = l.location
		LEFT JOIN unalloc ON unalloc.sku = l.sku AND l.location = 'default'
		CROSS JOIN LATERAL (SELECT COALESCE(alloc.q, 0) + COALESCE(unalloc.q, 0) AS q) want
		WHERE l.sold <> want.q`)
	if len(recount) > 0 {
		t.Errorf("a location's sold is not what the live orders took there: %s", strings.Join(recount[:min(5, len(recount))], "; "))
	}
	rows, err := c.db.QueryContext(ctx, "SELECT location, SUM(sold) FROM sku_locations GROUP BY location")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	sold := map[string]int64{}
	for rows.Next() {
		var loc string
		var n int64
		if err := rows.Scan(&loc, &n); err != nil {
			t.Fatal(err)
		}
		sold[loc] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sold
}

// locatedFigures says how a located SKU's units were sold: per location, and
// how many live orders took units of it from two locations or more (and the
// feed's transfers, when it had some: moved, short); it fails
// the test when east and west sold nothing (the run proved nothing of them).
func (c *cluster) locatedFigures(sku string, moved, short int) string {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	per := c.strings(ctx, `SELECT location || ' ' || sold FROM sku_locations WHERE sku = '`+sku+`' ORDER BY location`)
	var split, named int
	if err := c.db.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT a.owner_id FROM allocations a JOIN orders o ON o.id = a.owner_id
		WHERE a.sku = $1 AND o.status <> 'cancelled' GROUP BY a.owner_id HAVING count(*) > 1) x`, sku).Scan(&split); err != nil {
		t.Fatal(err)
	}
	if err := c.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(sold), 0) FROM sku_locations WHERE sku = $1 AND location <> 'default'`, sku).Scan(&named); err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Errorf("%s sold nothing in east and west: the run proves nothing of locations (%v)", sku, per)
	}
	out := fmt.Sprintf("%s sold per location: %s; %d live orders took units of it from two or three", sku, strings.Join(per, ", "), split)
	if moved+short > 0 {
		out += fmt.Sprintf("; %d transfers moved units into east and west, %d found too few", moved, short)
	}
	return out
}

// locatedLines are the lines (JSON) of a request for sku, stocked in the
// three locations, and the units they ask for by SKU; one of four shapes:
// two lines of sku naming two locations; a line that must not be split; a
// line the service allocates, split as needed; a line of sku and one of
// another located SKU, each naming a location, in either order (so that
// requests name the same locations in opposite orders).
func locatedLines(rng *rand.Rand, sku string, skus []string, located map[string]bool) (string, map[string]int) {
	line := func(sku string, q int, extra string) string {
		return fmt.Sprintf(`{"sku":%q,"quantity":%d%s}`, sku, q, extra)
	}
	at := func(loc string) string { return fmt.Sprintf(`,"location":%q`, loc) }
	a := locations[rng.IntN(3)]
	b := locations[(slices.Index(locations, a)+1+rng.IntN(2))%3]
	q := 1 + rng.IntN(3)
	var lines []string
	units := map[string]int{}
	switch rng.IntN(4) {
	case 0:
		lines = []string{line(sku, 1, at(a)), line(sku, q, at(b))}
		units[sku] = 1 + q
	case 1:
		lines = []string{line(sku, q, `,"split":false`)}
		units[sku] = q
	case 2:
		lines = []string{line(sku, q, "")}
		units[sku] = q
	default:
		other := sku
		for _, s := range skus {
			if located[s] && s != sku {
				other = s
			}
		}
		lines = []string{line(sku, 1, at(a)), line(other, 1, at(b))}
		units[sku]++
		units[other]++
	}
	if rng.IntN(2) == 0 {
		slices.Reverse(lines)
	}
	return "[" + strings.Join(lines, ",") + "]", units
}

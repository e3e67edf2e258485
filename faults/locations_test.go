//go:build faults

package faults

import (
	"context"
	"strings"
)

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

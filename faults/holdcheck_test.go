//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
)

// holdFigures is what became of a test's holds, in the database.
type holdFigures struct {
	Placed          int     `json:"placed"`
	Confirmed       int     `json:"confirmed"`
	Expired         int     `json:"expired"`
	Released        int     `json:"released"`
	SweptLateMaxMS  float64 `json:"swept_late_max_ms"` // the largest ended_at - expires_at of an expired hold
	SweptPastBound  int     `json:"swept_past_bound"`  // expired holds swept more than holdBound after they were due
	ReturnedTwice   int     `json:"returned_twice"`    // hold lines with more than one expire or release entry in the ledger
	SweeperRefusals float64 `json:"sweeper_refusals"`  // stockguard_sweeper_refusals_total, all instances
}

func (h *holdFigures) String() string {
	return fmt.Sprintf("placed:%d,confirmed:%d,expired:%d,released:%d,swept_late_max=%.0fms,swept_past_%s=%d,returned_twice=%d,sweeper_refusals=%g",
		h.Placed, h.Confirmed, h.Expired, h.Released, h.SweptLateMaxMS, holdBound, h.SweptPastBound, h.ReturnedTwice, h.SweeperRefusals)
}

// outage is a time during which holds could not be swept (Redis down, the
// database failing over): the holds due in it may be swept up to holdBound
// after it ends.
type outage struct{ from, to time.Time }

// checkHolds checks I6 at once (no hold held sweepBound past its expiry, on
// the database's clock), waits for every hold to end, then checks, through the
// API and in the database: I1 per SKU (and reserved back to 0), I6 on each hold
// (every expired hold swept within sweepBound of its expiry, or of the outage's
// end for those due in one; never before its expiry), I7 (an order only for a confirmed hold, one
// per hold, confirmed before its expiry), the ledger (one entry returning each
// line of an expired or released hold, none for a confirmed one), what the
// clients were answered against what the database holds, I3 and I4. It fills
// r's figures; every violation fails the test.
func (c *cluster) checkHolds(r *result, book *holdBook, skus []string, outs ...outage) *holdFigures {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, 30*time.Second, "no request in flight at the balancer", func() bool { return c.lb.inFlight.Load() == 0 })

	var overdue int
	if err := c.db.QueryRowContext(ctx, "SELECT count(*) FROM reservations WHERE status = 'held' AND expires_at < clock_timestamp() - make_interval(secs => $1)",
		sweepBound.Seconds()).Scan(&overdue); err != nil {
		t.Fatal(err)
	}
	if overdue > 0 && len(outs) == 0 {
		t.Errorf("I6: %d holds still held %s past their expiry", overdue, sweepBound)
	}

	// Every hold ends: the latest expiry, I6's bound, and room for a loaded
	// machine; how late each one was is checked below, on the database's clock.
	var last time.Time
	if err := c.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(expires_at), clock_timestamp()) FROM reservations").Scan(&last); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Until(last)+sweepBound+20*time.Second, "every hold ended (swept, confirmed or released)", func() bool {
		var n int
		return c.db.QueryRowContext(ctx, "SELECT count(*) FROM reservations WHERE status = 'held'").Scan(&n) == nil && n == 0
	})

	f := &holdFigures{}
	f.Placed, f.Confirmed, f.Expired, f.Released = c.holdStatuses(ctx)
	c.checkSweptInTime(ctx, f, outs)
	c.checkHoldOrders(ctx)
	c.checkHoldLedger(ctx, f)
	c.checkAnswers(ctx, book)

	// I1 through the API, per SKU and in the deep audit.
	for _, sku := range skus {
		status, b, err := getSettled(ctx, c.lb.url+"/v1/skus/"+sku, nil)
		var s orders.Stock
		if err != nil || status != http.StatusOK || json.Unmarshal(b, &s) != nil {
			t.Errorf("GET /v1/skus/%s: %d %v %s", sku, status, err, b)
			continue
		}
		if s.Stocked != s.Available+s.Held+s.Sold || s.Available < 0 || s.Held != 0 {
			t.Errorf("I1 through the API, %s, every hold ended: %+v", sku, s)
		}
		r.Oversold = max(r.Oversold, s.Sold+s.Held-s.Stocked)
	}
	var audit orders.Audit
	status, b, err := getSettled(ctx, c.lb.url+"/v1/audit?deep=true", map[string]string{"Authorization": "Bearer " + adminToken})
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &audit) != nil {
		t.Fatalf("GET /v1/audit: %d %v %s", status, err, b)
	}
	r.Oversold = max(r.Oversold, audit.Oversold)
	if !audit.Consistent || audit.Oversold != 0 {
		t.Errorf("GET /v1/audit: %+v", audit)
	}

	// I1 in the database: the counters, and the counters against the history.
	store := gormstore.New(c.gdb, time.Now, time.Minute)
	stocks, err := store.Stocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recounts, err := store.Recount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := orders.NewAudit(stocks, recounts); !a.Consistent || a.Oversold != 0 {
		r.Oversold = max(r.Oversold, a.Oversold, 1)
		t.Errorf("database audit: %+v", a)
	}
	for _, st := range stocks {
		if st.Stocked != st.Available+st.Held+st.Sold || st.Available < 0 || st.Held != 0 {
			t.Errorf("I1 in the database, %s, every hold ended: stocked %d, available %d, reserved %d, sold %d",
				st.SKU, st.Stocked, st.Available, st.Held, st.Sold)
		}
	}
	c.checkLocations(ctx) // and per location

	// I2 for what the clients were answered 201: plain orders and confirms.
	acked := slices.Clone(book.orders)
	for _, h := range book.holds {
		acked = append(acked, h.orders...)
	}
	slices.Sort(acked)
	acked = slices.Compact(acked)
	r.Acknowledged = len(acked)
	missing := c.missingFromDB(ctx, acked)
	r.LostAcked = len(missing)
	if len(missing) > 0 {
		t.Errorf("%d acknowledged orders are missing (I2): %v", len(missing), missing[:min(5, len(missing))])
	}

	r.FencesMonotonic = c.fencesMonotonic(ctx, r) // I3
	r.CacheConverged = c.cacheConverges(ctx, stocks)
	r.FenceRejections = c.total(mFenceRejections)
	r.LeasesLost = c.total(mLeasesLost)
	f.SweeperRefusals = c.total(mSweepRefusals)
	r.Errors = c.lb.errors5xx(anyReplica) + book.failed
	r.Unsettled = int64(book.undecided)
	r.Holds = f
	return f
}

// getSettled is get, asked again on a 5xx or a lost answer for 30s at most: a
// replica still reconnecting after a fault, a deep recount past its deadline
// on a busy machine.
func getSettled(ctx context.Context, rawURL string, hdr map[string]string) (int, []byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, b, err := get(ctx, rawURL, hdr)
		if (err == nil && status < 500) || time.Now().After(deadline) || ctx.Err() != nil {
			return status, b, err
		}
		hold(200 * time.Millisecond) // asking again, with a deadline
	}
}

// holdStatuses counts the holds by status.
func (c *cluster) holdStatuses(ctx context.Context) (placed, confirmed, expired, released int) {
	t := c.t
	rows, err := c.db.QueryContext(ctx, "SELECT status, count(*) FROM reservations GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		placed += n
		switch s {
		case "confirmed":
			confirmed = n
		case "expired":
			expired = n
		case "released":
			released = n
		default:
			t.Errorf("%d holds read %q after every hold ended", n, s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return placed, confirmed, expired, released
}

// checkSweptInTime checks I6 on each expired hold: swept (ended_at, the
// database's clock) no earlier than its expiry and at most sweepBound after it,
// or after an outage's end for a hold due in it; it counts those swept more
// than holdBound after.
func (c *cluster) checkSweptInTime(ctx context.Context, f *holdFigures, outs []outage) {
	t := c.t
	rows, err := c.db.QueryContext(ctx, "SELECT id, expires_at, ended_at FROM reservations WHERE status = 'expired'")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var early, late []string
	for rows.Next() {
		var id string
		var exp, ended time.Time
		if err := rows.Scan(&id, &exp, &ended); err != nil {
			t.Fatal(err)
		}
		lateBy := ended.Sub(exp)
		f.SweptLateMaxMS = max(f.SweptLateMaxMS, float64(lateBy)/float64(time.Millisecond))
		due := exp
		for _, out := range outs {
			if exp.Before(out.to) && exp.After(out.from.Add(-sweepBound)) && out.to.After(due) {
				due = out.to
			}
		}
		if ended.Sub(due) > holdBound {
			f.SweptPastBound++
		}
		switch {
		case lateBy < 0:
			early = append(early, fmt.Sprintf("%s expired %s, swept %s", id, exp.Format(time.RFC3339Nano), ended.Format(time.RFC3339Nano)))
		case ended.Sub(due) > sweepBound:
			late = append(late, fmt.Sprintf("%s swept %dms after its expiry", id, lateBy.Milliseconds()))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(early) > 0 {
		t.Errorf("%d holds swept before they expired: %v", len(early), early[:min(5, len(early))])
	}
	if len(late) > 0 {
		t.Errorf("I6: %d holds swept more than %s after they were due: %v", len(late), sweepBound, late[:min(5, len(late))])
	}
}

// checkHoldOrders checks I7: an order only for a confirmed hold, exactly one
// per confirmed hold (the one the hold names), and each hold confirmed before
// its expiry.
func (c *cluster) checkHoldOrders(ctx context.Context) {
	t := c.t
	bad := c.strings(ctx, `SELECT r.id || ' (' || r.status || '): ' || count(o.id) || ' orders, named ' || COALESCE(r.order_id, '-')
		|| ', ended ' || COALESCE((r.ended_at - r.expires_at)::text, '-') || ' after its expiry'
		FROM reservations r LEFT JOIN orders o ON o.reservation_id = r.id
		GROUP BY r.id, r.status, r.order_id, r.ended_at, r.expires_at
		HAVING (r.status = 'confirmed' AND (count(o.id) <> 1 OR r.order_id IS NULL OR r.ended_at >= r.expires_at
		         OR r.order_id <> MIN(o.id)))
		    OR (r.status <> 'confirmed' AND (count(o.id) > 0 OR r.order_id IS NOT NULL))`)
	if len(bad) > 0 {
		t.Errorf("I7: %d holds with other than one order when confirmed (before expiry), or any when not: %v", len(bad), bad[:min(5, len(bad))])
	}
	orphans := c.strings(ctx, `SELECT o.id FROM orders o LEFT JOIN reservations r ON r.id = o.reservation_id
		WHERE o.reservation_id IS NOT NULL AND r.id IS NULL`)
	if len(orphans) > 0 {
		t.Errorf("I7: %d orders name a hold that does not exist: %v", len(orphans), orphans[:min(5, len(orphans))])
	}
	// A confirmed hold's order has its units (every confirm here is whole).
	diff := c.strings(ctx, `SELECT r.id || ' ' || rl.sku || ': held ' || rl.quantity || ', ordered ' || COALESCE(ol.quantity::text, '-')
		FROM reservations r JOIN reservation_lines rl ON rl.reservation_id = r.id
		LEFT JOIN order_lines ol ON ol.order_id = r.order_id AND ol.sku = rl.sku
		WHERE r.status = 'confirmed' AND (ol.quantity IS NULL OR ol.quantity <> rl.quantity)`)
	if len(diff) > 0 {
		t.Errorf("%d confirmed hold lines whose order has other units: %v", len(diff), diff[:min(5, len(diff))])
	}
}

// checkHoldLedger checks that no unit was returned twice, nor a confirmed
// hold's: per hold line, one hold entry taking its units, and then one expire
// entry (expired) or one release entry (released) giving them back, or none
// (confirmed whole).
func (c *cluster) checkHoldLedger(ctx context.Context, f *holdFigures) {
	t := c.t
	type line struct {
		id, status, sku         string
		qty                     int64
		holds, expires, release int
		taken, given            int64
	}
	rows, err := c.db.QueryContext(ctx, `SELECT r.id, r.status, rl.sku, rl.quantity,
		  count(*) FILTER (WHERE g.kind = 'hold'), count(*) FILTER (WHERE g.kind = 'expire'), count(*) FILTER (WHERE g.kind = 'release'),
		  COALESCE(-SUM(g.delta) FILTER (WHERE g.kind = 'hold'), 0), COALESCE(SUM(g.delta) FILTER (WHERE g.kind IN ('expire', 'release')), 0)
		FROM reservations r JOIN reservation_lines rl ON rl.reservation_id = r.id
		LEFT JOIN stock_ledger g ON g.reservation_id = r.id AND g.sku = rl.sku
		GROUP BY r.id, r.status, rl.sku, rl.quantity`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var bad []string
	for rows.Next() {
		var l line
		if err := rows.Scan(&l.id, &l.status, &l.sku, &l.qty, &l.holds, &l.expires, &l.release, &l.taken, &l.given); err != nil {
			t.Fatal(err)
		}
		if l.expires+l.release > 1 {
			f.ReturnedTwice++
		}
		want := map[string][2]int{"expired": {1, 0}, "released": {0, 1}, "confirmed": {0, 0}}[l.status]
		given := int64(want[0]+want[1]) * l.qty
		if l.holds != 1 || l.taken != l.qty || l.expires != want[0] || l.release != want[1] || l.given != given {
			bad = append(bad, fmt.Sprintf("%s (%s) %s ×%d: %d hold entries taking %d, %d expire and %d release entries giving back %d",
				l.id, l.status, l.sku, l.qty, l.holds, l.taken, l.expires, l.release, l.given))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("%d hold lines whose ledger is not one hold then one return (none if confirmed); %d returned twice: %v",
			len(bad), f.ReturnedTwice, bad[:min(5, len(bad))])
	}
}

// checkAnswers checks what the clients were answered against the database: a
// hold answered 201 to a confirm is confirmed into that order (every 201 the
// same order), one answered 410 is expired, one released is released.
func (c *cluster) checkAnswers(ctx context.Context, book *holdBook) {
	t := c.t
	type row struct{ status, order string }
	db := map[string]row{}
	rows, err := c.db.QueryContext(ctx, "SELECT id, status, COALESCE(order_id, '') FROM reservations")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var r row
		if err := rows.Scan(&id, &r.status, &r.order); err != nil {
			t.Fatal(err)
		}
		db[id] = r
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var bad []string
	for id, h := range book.holds {
		got, ok := db[id]
		switch {
		case !ok:
			bad = append(bad, id+": answered 201, not in the database")
		case len(h.orders) > 0 && h.gone > 0:
			bad = append(bad, fmt.Sprintf("%s: its confirms were answered both 201 (%v) and 410", id, h.orders))
		case len(h.orders) > 0 && (got.status != "confirmed" || slices.ContainsFunc(h.orders, func(o string) bool { return o != got.order })):
			bad = append(bad, fmt.Sprintf("%s: confirms answered orders %v, the database says %s into %q", id, h.orders, got.status, got.order))
		case h.gone > 0 && got.status != "expired":
			bad = append(bad, fmt.Sprintf("%s: a confirm answered 410, the database says %s", id, got.status))
		case h.freed && got.status != "released":
			bad = append(bad, fmt.Sprintf("%s: released (200), the database says %s", id, got.status))
		case len(h.others) > 0:
			bad = append(bad, fmt.Sprintf("%s: unexpected answers %v", id, h.others))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Errorf("%d holds whose answers and database disagree: %s", len(bad), strings.Join(bad[:min(5, len(bad))], "; "))
	}
}

// strings runs a query of one text column.
func (c *cluster) strings(ctx context.Context, q string) []string {
	t := c.t
	rows, err := c.db.QueryContext(ctx, q)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

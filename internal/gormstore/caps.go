package gormstore

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
)

// The caps' counters (I9): client_sku_holds, the units a client holds of a
// SKU, and customer_sku_units, the units a client's customer has of a SKU.
// Each write that changes what they count changes them in its transaction,
// after the SKUs' rows (whose locks, taken first by every writer, order the
// counters' writers too):
//
//   - a batch of holds and orders raises them (Commit): each row's CHECK
//     refuses a count past the cap the raise writes beside it (the hold's
//     client's, the SKU's max_per_customer, read in the statement), under the
//     row's lock, whatever the per-SKU locks did; the refusal fails the
//     transaction, as a short total does.
//   - a confirm, a release, an expiry and a cancel lower them, never below
//     zero (units a counter never counted, by a replica of an older version
//     during an upgrade, must not make a hold unable to end: the deep audit
//     reports such a counter).
//
// On PostgreSQL the counters' statements ride in front of one of the batch's
// INSERTs (leading), their rows as arrays (unnest), so that their shape, which
// the driver caches, does not grow with the batch: no round trip of their
// own. Elsewhere each kind is one statement.

// The CHECK constraints of the counters' tables, as the databases name them in
// a refusal.
const (
	chkHeld  = "chk_client_sku_holds_held"
	chkUnits = "chk_customer_sku_units_units"
)

// capTally is what a write changes of the counters.
type capTally struct {
	held    map[orders.ClientSKU]int64
	maxHeld map[orders.ClientSKU]int64 // a raise's: the smallest cap of the holds that raise it
	units   map[orders.CustomerSKU]int64
}

func (t *capTally) addHeld(clientID, sku string, n int64) {
	if clientID == "" || n == 0 {
		return
	}
	if t.held == nil {
		t.held = map[orders.ClientSKU]int64{}
	}
	t.held[orders.ClientSKU{ClientID: clientID, SKU: sku}] += n
}

func (t *capTally) addUnits(sku, clientID, customer string, n int64) {
	if customer == "" || n == 0 {
		return
	}
	if t.units == nil {
		t.units = map[orders.CustomerSKU]int64{}
	}
	t.units[orders.CustomerSKU{SKU: sku, ClientID: clientID, Customer: customer}] += n
}

func (t *capTally) empty() bool { return len(t.held) == 0 && len(t.units) == 0 }

// placedCaps is what placements add to the counters: a client's hold to its
// units held, under the smallest cap its holds in the batch carry (the
// service decides them so), and an order or hold with a customer to the
// customer's units.
func placedCaps(ps []orders.Placement) *capTally {
	t := &capTally{}
	for _, p := range ps {
		o := p.Order
		for _, it := range o.Items {
			if p.Hold != nil && o.ClientID != "" {
				t.addHeld(o.ClientID, it.SKU, int64(it.Quantity))
				k := orders.ClientSKU{ClientID: o.ClientID, SKU: it.SKU}
				if t.maxHeld == nil {
					t.maxHeld = map[orders.ClientSKU]int64{}
				}
				if m, ok := t.maxHeld[k]; !ok || p.MaxHeld < m {
					t.maxHeld[k] = p.MaxHeld
				}
			}
			t.addUnits(it.SKU, o.ClientID, o.Customer, int64(it.Quantity))
		}
	}
	return t
}

// heldKeys and unitsKeys are the tally's counters, sorted.
func (t *capTally) heldKeys() []orders.ClientSKU {
	return slices.SortedFunc(maps.Keys(t.held), func(a, b orders.ClientSKU) int {
		return strings.Compare(a.ClientID+"\x00"+a.SKU, b.ClientID+"\x00"+b.SKU)
	})
}

func (t *capTally) unitsKeys() []orders.CustomerSKU {
	return slices.SortedFunc(maps.Keys(t.units), func(a, b orders.CustomerSKU) int {
		return strings.Compare(a.SKU+"\x00"+a.ClientID+"\x00"+a.Customer, b.SKU+"\x00"+b.ClientID+"\x00"+b.Customer)
	})
}

// raise adds the tally to the counters, guarded by their caps: on PostgreSQL
// as WITH queries added to l (returned, to lead an INSERT of the write),
// elsewhere now.
func (t *capTally) raise(tx *gorm.DB, l *leading) (*leading, error) {
	if t.empty() {
		return l, nil
	}
	if tx.Name() == "postgres" {
		return t.raiseLeading(l), nil
	}
	return l, t.raiseNow(tx)
}

// lower takes the tally (positive amounts) off the counters, never below zero:
// on PostgreSQL as WITH queries added to l, elsewhere now.
func (t *capTally) lower(tx *gorm.DB, l *leading) (*leading, error) {
	if t.empty() {
		return l, nil
	}
	if tx.Name() == "postgres" {
		return t.lowerLeading(l), nil
	}
	return l, t.lowerNow(tx)
}

// ph is PostgreSQL's placeholder number n.
func ph(n int) string { return "$" + strconv.Itoa(n) }

func (t *capTally) raiseLeading(l *leading) *leading {
	if len(t.held) > 0 {
		var clients, skus []string
		var held, caps []int64
		for _, k := range t.heldKeys() {
			clients, skus = append(clients, k.ClientID), append(skus, k.SKU)
			held, caps = append(held, t.held[k]), append(caps, t.maxHeld[k])
		}
		l = l.with("raised_holds", func(n int) string {
			return "INSERT INTO client_sku_holds (client_id, sku, held, max_held) SELECT * FROM unnest(" +
				ph(n+1) + "::varchar[], " + ph(n+2) + "::varchar[], " + ph(n+3) + "::bigint[], " + ph(n+4) + "::bigint[]) " +
				"ON CONFLICT (client_id, sku) DO UPDATE SET held = client_sku_holds.held + excluded.held, max_held = excluded.max_held"
		}, clients, skus, held, caps)
	}
	if len(t.units) > 0 {
		skus, clients, customers, units := t.unitsColumns()
		l = l.with("raised_units", func(n int) string {
			return "INSERT INTO customer_sku_units (sku, client_id, customer, units, max_units) " +
				"SELECT v.sku, v.client_id, v.customer, v.units, s.max_per_customer FROM unnest(" +
				ph(n+1) + "::varchar[], " + ph(n+2) + "::varchar[], " + ph(n+3) + "::varchar[], " + ph(n+4) + "::bigint[]) " +
				"AS v(sku, client_id, customer, units) JOIN skus s ON s.sku = v.sku " +
				"ON CONFLICT (sku, client_id, customer) DO UPDATE SET units = customer_sku_units.units + excluded.units, max_units = excluded.max_units"
		}, skus, clients, customers, units)
	}
	return l
}

func (t *capTally) lowerLeading(l *leading) *leading {
	if len(t.held) > 0 {
		clients, skus, held := t.heldColumns()
		l = l.with("lowered_holds", func(n int) string {
			return "UPDATE client_sku_holds AS t SET held = CASE WHEN t.held > v.n THEN t.held - v.n ELSE 0 END FROM unnest(" +
				ph(n+1) + "::varchar[], " + ph(n+2) + "::varchar[], " + ph(n+3) + "::bigint[]) AS v(client_id, sku, n) " +
				"WHERE t.client_id = v.client_id AND t.sku = v.sku"
		}, clients, skus, held)
	}
	if len(t.units) > 0 {
		skus, clients, customers, units := t.unitsColumns()
		l = l.with("lowered_units", func(n int) string {
			return "UPDATE customer_sku_units AS t SET units = CASE WHEN t.units > v.n THEN t.units - v.n ELSE 0 END FROM unnest(" +
				ph(n+1) + "::varchar[], " + ph(n+2) + "::varchar[], " + ph(n+3) + "::varchar[], " + ph(n+4) + "::bigint[]) " +
				"AS v(sku, client_id, customer, n) WHERE t.sku = v.sku AND t.client_id = v.client_id AND t.customer = v.customer"
		}, skus, clients, customers, units)
	}
	return l
}

// raiseNow is raise on MySQL/MariaDB and SQLite: one upsert per kind (per
// insertRows counters), the customers' caps read from skus row by row.
func (t *capTally) raiseNow(tx *gorm.DB) error {
	mysql := tx.Name() == "mysql"
	for chunk := range slices.Chunk(t.heldKeys(), insertRows) {
		var b strings.Builder
		args := make([]any, 0, 4*len(chunk))
		b.WriteString("INSERT INTO client_sku_holds (client_id, sku, held, max_held) VALUES ")
		for i, k := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?)")
			args = append(args, k.ClientID, k.SKU, t.held[k], t.maxHeld[k])
		}
		if mysql {
			b.WriteString(" ON DUPLICATE KEY UPDATE held = held + VALUES(held), max_held = VALUES(max_held)")
		} else {
			b.WriteString(" ON CONFLICT (client_id, sku) DO UPDATE SET held = held + excluded.held, max_held = excluded.max_held")
		}
		if err := exec(tx, []byte(b.String()), args); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(t.unitsKeys(), insertRows) {
		var b strings.Builder
		args := make([]any, 0, 5*len(chunk))
		b.WriteString("INSERT INTO customer_sku_units (sku, client_id, customer, units, max_units) VALUES ")
		for i, k := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, (SELECT max_per_customer FROM skus WHERE sku = ?))")
			args = append(args, k.SKU, k.ClientID, k.Customer, t.units[k], k.SKU)
		}
		if mysql {
			b.WriteString(" ON DUPLICATE KEY UPDATE units = units + VALUES(units), max_units = VALUES(max_units)")
		} else {
			b.WriteString(" ON CONFLICT (sku, client_id, customer) DO UPDATE SET units = units + excluded.units, max_units = excluded.max_units")
		}
		if err := exec(tx, []byte(b.String()), args); err != nil {
			return err
		}
	}
	return nil
}

// lowerNow is lower on MySQL/MariaDB and SQLite: one UPDATE per kind (per
// insertRows counters), each row's amount chosen by a CASE.
func (t *capTally) lowerNow(tx *gorm.DB) error {
	least := "MIN" // SQLite's scalar min of two
	if tx.Name() == "mysql" {
		least = "LEAST"
	}
	for chunk := range slices.Chunk(t.heldKeys(), insertRows) {
		var by, where strings.Builder
		var byArgs, whereArgs []any
		for i, k := range chunk {
			by.WriteString(" WHEN client_id = ? AND sku = ? THEN ?")
			byArgs = append(byArgs, k.ClientID, k.SKU, t.held[k])
			if i > 0 {
				where.WriteString(" OR ")
			}
			where.WriteString("(client_id = ? AND sku = ?)")
			whereArgs = append(whereArgs, k.ClientID, k.SKU)
		}
		q := "UPDATE client_sku_holds SET held = held - " + least + "(held, CASE" + by.String() + " ELSE 0 END) WHERE " + where.String()
		if err := exec(tx, []byte(q), append(byArgs, whereArgs...)); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(t.unitsKeys(), insertRows) {
		var by, where strings.Builder
		var byArgs, whereArgs []any
		for i, k := range chunk {
			by.WriteString(" WHEN sku = ? AND client_id = ? AND customer = ? THEN ?")
			byArgs = append(byArgs, k.SKU, k.ClientID, k.Customer, t.units[k])
			if i > 0 {
				where.WriteString(" OR ")
			}
			where.WriteString("(sku = ? AND client_id = ? AND customer = ?)")
			whereArgs = append(whereArgs, k.SKU, k.ClientID, k.Customer)
		}
		q := "UPDATE customer_sku_units SET units = units - " + least + "(units, CASE" + by.String() + " ELSE 0 END) WHERE " + where.String()
		if err := exec(tx, []byte(q), append(byArgs, whereArgs...)); err != nil {
			return err
		}
	}
	return nil
}

// capped is err as the refusal of a cap when a counter's CHECK refused it
// (which counter, the databases do not say: the service reads them to tell).
func capped(err error) error {
	if err == nil {
		return nil
	}
	switch msg := err.Error(); {
	case strings.Contains(msg, chkHeld):
		return &orders.CapError{Cap: orders.ErrHoldQuotaExceeded}
	case strings.Contains(msg, chkUnits):
		return &orders.CapError{Cap: orders.ErrCustomerLimitExceeded}
	}
	return err
}

// Caps reads the counters named and the limits per customer of their SKUs in
// one statement.
func (s *Store) Caps(ctx context.Context, held []orders.ClientSKU, units []orders.CustomerSKU) (orders.Caps, error) {
	out := orders.Caps{Held: map[orders.ClientSKU]int64{}, Units: map[orders.CustomerSKU]int64{}, MaxPerCustomer: map[string]int64{}}
	if len(held) == 0 && len(units) == 0 {
		return out, nil
	}
	var parts []string
	var args []any
	if len(held) > 0 {
		var w strings.Builder
		for i, k := range held {
			if i > 0 {
				w.WriteString(" OR ")
			}
			w.WriteString("(client_id = ? AND sku = ?)")
			args = append(args, k.ClientID, k.SKU)
		}
		parts = append(parts, "SELECT 1 AS kind, client_id AS a, sku AS b, '' AS c, held AS n FROM client_sku_holds WHERE "+w.String())
	}
	if len(units) > 0 {
		var w strings.Builder
		skus := map[string]bool{}
		for i, k := range units {
			if i > 0 {
				w.WriteString(" OR ")
			}
			w.WriteString("(sku = ? AND client_id = ? AND customer = ?)")
			args = append(args, k.SKU, k.ClientID, k.Customer)
			skus[k.SKU] = true
		}
		parts = append(parts, "SELECT 2, client_id, sku, customer, units FROM customer_sku_units WHERE "+w.String(),
			"SELECT 3, '', sku, '', max_per_customer FROM skus WHERE max_per_customer IS NOT NULL AND sku IN ?")
		args = append(args, slices.Sorted(maps.Keys(skus)))
	}
	db, cancel := s.conn(ctx)
	defer cancel()
	rows, err := db.Raw(strings.Join(parts, " UNION ALL "), args...).Rows()
	if err != nil {
		return out, unavailable("caps", err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var kind int
		var a, b, c string
		var n int64
		if err := rows.Scan(&kind, &a, &b, &c, &n); err != nil {
			return out, unavailable("caps", err)
		}
		switch kind {
		case 1:
			out.Held[orders.ClientSKU{ClientID: a, SKU: b}] = n
		case 2:
			out.Units[orders.CustomerSKU{SKU: b, ClientID: a, Customer: c}] = n
		case 3:
			out.MaxPerCustomer[b] = n
		}
	}
	return out, unavailable("caps", rows.Err())
}

// heldRecount and unitsRecount count the counters from the live holds and
// orders: the migration's backfill, and the deep audit's recount.
const (
	heldRecount = `SELECT r.client_id, l.sku, SUM(l.quantity)
FROM reservations r JOIN reservation_lines l ON l.reservation_id = r.id
WHERE r.status = 'held' AND r.client_id <> ''
GROUP BY r.client_id, l.sku`
	unitsRecount = `SELECT u.sku, u.client_id, u.customer, SUM(u.quantity) FROM (
  SELECT l.sku AS sku, r.client_id AS client_id, r.customer AS customer, l.quantity AS quantity
  FROM reservations r JOIN reservation_lines l ON l.reservation_id = r.id
  WHERE r.status = 'held' AND r.customer <> ''
  UNION ALL
  SELECT ol.sku, o.client_id, o.customer, ol.quantity
  FROM orders o JOIN order_lines ol ON ol.order_id = o.id
  WHERE o.status = 'placed' AND o.customer <> ''
) u GROUP BY u.sku, u.client_id, u.customer`
)

// capAudit checks I9 on the counters: none past the cap it was raised under
// nor below zero and, when deep, each equal to its recount (a counter at 0
// and no live units agree).
func capAudit(tx *gorm.DB, deep bool) (orders.CapAudit, error) {
	a := orders.CapAudit{Miscounted: -1}
	err := tx.Raw(`SELECT
  (SELECT COUNT(*) FROM client_sku_holds WHERE held < 0 OR held > max_held) +
  (SELECT COUNT(*) FROM customer_sku_units WHERE units < 0 OR units > max_units)`).Scan(&a.OverLimit).Error
	if err != nil || !deep {
		return a, err
	}
	count := func(q string) (map[string]int64, error) {
		rows, err := tx.Raw(q).Rows()
		if err != nil {
			return nil, err
		}
		defer func() { _ = rows.Close() }()
		cols, err := rows.Columns()
		if err != nil {
			return nil, err
		}
		out := map[string]int64{}
		for rows.Next() {
			keys := make([]string, len(cols)-1)
			dest := make([]any, len(cols))
			for i := range keys {
				dest[i] = &keys[i]
			}
			var n int64
			dest[len(cols)-1] = &n
			if err := rows.Scan(dest...); err != nil {
				return nil, err
			}
			if n != 0 {
				out[strings.Join(keys, "\x00")] = n
			}
		}
		return out, rows.Err()
	}
	a.Miscounted = 0
	for _, pair := range [][2]string{
		{"SELECT client_id, sku, held FROM client_sku_holds", heldRecount},
		{"SELECT sku, client_id, customer, units FROM customer_sku_units", unitsRecount},
	} {
		have, err := count(pair[0])
		if err != nil {
			return a, err
		}
		want, err := count(pair[1])
		if err != nil {
			return a, err
		}
		for k, n := range have {
			if want[k] != n {
				a.Miscounted++
			}
		}
		for k := range want {
			if _, ok := have[k]; !ok {
				a.Miscounted++
			}
		}
	}
	return a, nil
}

// heldColumns are the tally's held units as the statements' arrays, in key
// order: clients, SKUs, units.
func (t *capTally) heldColumns() (clients, skus []string, held []int64) {
	for _, k := range t.heldKeys() {
		clients, skus, held = append(clients, k.ClientID), append(skus, k.SKU), append(held, t.held[k])
	}
	return clients, skus, held
}

// unitsColumns are the tally's customers' units as the statements' arrays,
// in key order: SKUs, clients, customers, units.
func (t *capTally) unitsColumns() (skus, clients, customers []string, units []int64) {
	for _, k := range t.unitsKeys() {
		skus, clients, customers = append(skus, k.SKU), append(clients, k.ClientID), append(customers, k.Customer)
		units = append(units, t.units[k])
	}
	return skus, clients, customers, units
}

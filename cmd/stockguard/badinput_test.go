package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// problemTitles are the titles problem.go gives the problem types bad input
// gets.
var problemTitles = map[string]string{
	"malformed-body":         "Malformed request body",
	"body-too-large":         "Request body too large",
	"unsupported-media-type": "Unsupported media type",
	"unauthorized":           "A valid API key is required",
	"forbidden":              "The API key lacks the scope this route needs",
	"method-not-allowed":     "Method not allowed",
	"invalid":                "Invalid request",
	"not-found":              "Not found",
	"already-cancelled":      "Order already cancelled",
}

type badRequest struct {
	name        string
	method      string
	path        func() string // evaluated when the row runs: it may name an order an earlier row placed
	body        string
	contentType string // "-" for none
	header      map[string]string
	want        int
	problem     string // the type's last part; "" for a success
	placesOrder bool   // the answer is the order the later rows cancel
	// onContract: the request is one api/openapi.yaml allows, and is checked
	// against it; the others break it on purpose (apitest.OffContract), and only
	// their answers are checked.
	onContract bool
}

// Bad requests of every kind against a replica on real Redis and a real database:
// each gets its status and problem document, and none of them writes anything.
// The only writes are the table's own: one order placed and cancelled (twice).
func TestBadRequestsChangeNothing(t *testing.T) {
	c := startCluster(t, 1)
	base := c.urls[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := "BI-" + testenv.RandomID() + "-" // this test's SKUs
	skuA, skuB, skuC := p+"A", p+"B", p+"C"
	for sku, n := range map[string]int{skuA: 100, skuB: 50, skuC: 10} {
		admin(ctx, t, http.MethodPost, base+"/v1/skus/"+sku+"/restock", fmt.Sprintf(`{"quantity":%d}`, n), nil)
	}
	db, err := gormstore.Open(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	rdb := c.redis.Client(t)
	keys := redislease.Keys{Namespace: c.redis.Namespace}
	before := takeSnapshot(ctx, t, db)
	redisBefore := redisSnapshot(ctx, t, rdb, c.redis.Namespace)

	fixed := func(s string) func() string { return func() string { return s } }
	line := func(sku, qty string) string { return `{"sku":"` + sku + `","quantity":` + qty + `}` }
	order := func(lines ...string) string { return `{"items":[` + strings.Join(lines, ",") + `]}` }
	good := order(line(skuA, "1"))
	orderPath := fixed("/v1/orders")
	var placedID string // the one order the table places, to cancel twice

	rows := []badRequest{
		// Malformed JSON: 400.
		{name: "malformed", body: `{"items":[{"sku":`, want: 400, problem: "malformed-body"},
		{name: "truncated", body: order(line(skuA, "1"))[:len(good)-1], want: 400, problem: "malformed-body"},
		{name: "empty body", body: "", contentType: "application/json", want: 400, problem: "malformed-body"},
		{name: "not JSON at all", body: "items=1", want: 400, problem: "malformed-body"},
		{name: "byte order mark", body: "\ufeff" + good, want: 400, problem: "malformed-body"},
		{name: "trailing object", body: good + ` {}`, want: 400, problem: "malformed-body"},
		{name: "trailing garbage", body: good + `x`, want: 400, problem: "malformed-body"},
		{name: "two orders", body: good + good, want: 400, problem: "malformed-body"},
		{name: "unknown field", body: `{"items":[` + line(skuA, "1") + `],"coupon":"FREE"}`, want: 400, problem: "malformed-body"},
		{name: "unknown line field", body: order(`{"sku":"` + skuA + `","quantity":1,"price":0}`), want: 400, problem: "malformed-body"},
		{name: "duplicate items", body: `{"items":[` + line(skuA, "1") + `],"items":[` + line(skuB, "1") + `]}`, want: 400, problem: "malformed-body"},
		{name: "duplicate quantity", body: order(`{"sku":"` + skuA + `","quantity":1,"quantity":1000}`), want: 400, problem: "malformed-body"},
		{name: "duplicate sku in another case", body: order(`{"sku":"` + skuA + `","SKU":"` + skuB + `","quantity":1}`), want: 400, problem: "malformed-body"},
		{name: "items an object", body: `{"items":` + line(skuA, "1") + `}`, want: 400, problem: "malformed-body"},
		{name: "body an array", body: `[` + line(skuA, "1") + `]`, want: 400, problem: "malformed-body"},
		{name: "quantity a string", body: order(line(skuA, `"1"`)), want: 400, problem: "malformed-body"},
		{name: "quantity a boolean", body: order(line(skuA, "true")), want: 400, problem: "malformed-body"},
		{name: "quantity null", body: order(line(skuA, "null")), want: 400, problem: "malformed-body"},
		{name: "sku a number", body: order(`{"sku":1,"quantity":1}`), want: 400, problem: "malformed-body"},
		// Well-formed, invalid values: 422.
		{name: "quantity zero", body: order(line(skuA, "0")), want: 422, problem: "invalid"},
		{name: "quantity negative", body: order(line(skuA, "-1")), want: 422, problem: "invalid"},
		{name: "quantity fractional", body: order(line(skuA, "1.5")), want: 422, problem: "invalid"},
		{name: "quantity 1e30", body: order(line(skuA, "1e30")), want: 422, problem: "invalid"},
		{name: "quantity past int64", body: order(line(skuA, "99999999999999999999")), want: 422, problem: "invalid"},
		{name: "quantity 1001", body: order(line(skuA, "1001")), want: 422, problem: "invalid"},
		{name: "no lines", body: `{"items":[]}`, want: 422, problem: "invalid"},
		{name: "no items", body: `{}`, want: 422, problem: "invalid"},
		{name: "51 lines", body: order(slices.Repeat([]string{line(skuA, "1")}, 51)...), want: 422, problem: "invalid"},
		{name: "sku of 65 characters", body: order(line(p+strings.Repeat("x", 65-len(p)), "1")), want: 422, problem: "invalid"},
		{name: "sku empty", body: order(line("", "1")), want: 422, problem: "invalid"},
		{name: "sku missing", body: order(`{"quantity":1}`), want: 422, problem: "invalid"},
		{name: "sku unicode", body: order(line(p+"Ä", "1")), want: 422, problem: "invalid"},
		{name: "sku SQL", body: order(line(`'; DROP TABLE skus;--`, "1")), want: 422, problem: "invalid"},
		{name: "sku shell", body: order(line(`$(reboot)`, "1")), want: 422, problem: "invalid"},
		{name: "sku backticks", body: order(line("`reboot`", "1")), want: 422, problem: "invalid"},
		{name: "sku path", body: order(line("../"+skuA, "1")), want: 422, problem: "invalid"},
		{name: "one bad line of two", body: order(line(skuA, "1"), line(skuB, "0")), want: 422, problem: "invalid"},
		{name: "idempotency key with a space", body: good, header: map[string]string{"Idempotency-Key": "a b"}, want: 422, problem: "invalid"},
		// Size and type.
		{name: "over 16 KiB", body: order(slices.Repeat([]string{line(skuA, "1")}, 16<<10/len(line(skuA, "1"))+1)...), want: 413, problem: "body-too-large"},
		{name: "text/plain", body: good, contentType: "text/plain", want: 415, problem: "unsupported-media-type"},
		{name: "form", body: good, contentType: "application/x-www-form-urlencoded", want: 415, problem: "unsupported-media-type"},
		{name: "no content type", body: good, contentType: "-", want: 415, problem: "unsupported-media-type"},
		{name: "wrong method", method: http.MethodDelete, body: good, want: 405, problem: "method-not-allowed"},
		// Orders that do not exist.
		{name: "get unknown order", method: http.MethodGet, path: fixed("/v1/orders/no-such-order"), want: 404, problem: "not-found", onContract: true},
		{name: "get order by SQL", method: http.MethodGet, path: fixed("/v1/orders/" + url.PathEscape(`' OR '1'='1`)), want: 404, problem: "not-found", onContract: true},
		{name: "cancel unknown order", path: fixed("/v1/orders/no-such-order/cancel"), contentType: "-", want: 404, problem: "not-found", onContract: true},
		// The table's own writes: an order on skuC, cancelled, then cancelled again.
		{name: "place the order to cancel", body: order(line(skuC, "2")), want: 201, placesOrder: true, onContract: true},
		{name: "cancel it", path: func() string { return "/v1/orders/" + placedID + "/cancel" }, contentType: "-", want: 200, onContract: true},
		{name: "cancel it again", path: func() string { return "/v1/orders/" + placedID + "/cancel" }, contentType: "-", want: 409, problem: "already-cancelled", onContract: true},
		// Admin calls without the right token, and with it but bad input.
		{name: "restock without a token", path: fixed("/v1/skus/" + skuA + "/restock"), body: `{"quantity":5}`, header: noToken, want: 401, problem: "unauthorized"},
		{name: "restock with basic auth", path: fixed("/v1/skus/" + skuA + "/restock"), body: `{"quantity":5}`,
			header: map[string]string{"Authorization": "Basic " + adminToken}, want: 401, problem: "unauthorized"},
		{name: "restock with a wrong token", path: fixed("/v1/skus/" + skuA + "/restock"), body: `{"quantity":5}`,
			header: map[string]string{"Authorization": "Bearer not-" + adminToken}, want: 401, problem: "unauthorized", onContract: true},
		{name: "restock a new sku without a token", path: fixed("/v1/skus/" + p + "NEW/restock"), body: `{"quantity":5}`, header: noToken, want: 401, problem: "unauthorized"},
		{name: "audit without a token", method: http.MethodGet, path: fixed("/v1/audit"), header: noToken, want: 401, problem: "unauthorized"},
		{name: "audit with a wrong token", method: http.MethodGet, path: fixed("/v1/audit"),
			header: map[string]string{"Authorization": "Bearer not-" + adminToken}, want: 401, problem: "unauthorized", onContract: true},
		{name: "an order without a token", body: order(line(skuA, "1")), header: noToken, want: 401, problem: "unauthorized"},
		{name: "an order with the token in the query", path: fixed("/v1/orders?access_token=" + adminToken), body: order(line(skuA, "1")),
			header: noToken, want: 401, problem: "unauthorized"},
		{name: "restock zero", path: fixed("/v1/skus/" + skuA + "/restock"), body: `{"quantity":0}`,
			header: map[string]string{"Authorization": "Bearer " + adminToken}, want: 422, problem: "invalid"},
		{name: "restock a duplicate quantity", path: fixed("/v1/skus/" + skuA + "/restock"), body: `{"quantity":1,"quantity":1000000}`,
			header: map[string]string{"Authorization": "Bearer " + adminToken}, want: 400, problem: "malformed-body"},
		{name: "restock a SQL sku", path: fixed("/v1/skus/" + url.PathEscape(`'; DROP TABLE skus;--`) + "/restock"), body: `{"quantity":5}`,
			header: map[string]string{"Authorization": "Bearer " + adminToken}, want: 422, problem: "invalid"},
	}

	for _, r := range rows {
		method, path, ct := r.method, orderPath(), r.contentType
		if method == "" {
			method = http.MethodPost
		}
		if r.path != nil {
			path = r.path()
		}
		switch ct {
		case "":
			ct = "application/json"
		case "-":
			ct = ""
		}
		c := client(t)
		if !r.onContract {
			c = offContract(c)
		}
		status, hdr, body, err := send(ctx, c, method, base+path, r.body, ct, r.header)
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if status != r.want {
			t.Errorf("%s: %s %s answered %d, want %d: %s", r.name, method, path, status, r.want, body)
			continue
		}
		if r.problem == "" {
			if r.placesOrder {
				var o struct{ ID string }
				if err := json.Unmarshal(body, &o); err != nil || o.ID == "" {
					t.Fatalf("%s: no order id in %s", r.name, body)
				}
				placedID = o.ID
			}
			continue
		}
		checkProblem(t, r.name, path, status, r.problem, hdr, body)
	}
	if placedID == "" {
		t.Fatal("the table placed no order")
	}

	// Nothing changed but the order the table placed and cancelled.
	after := takeSnapshot(ctx, t, db)
	want := before.clone()
	want.orders[placedID] = "cancelled"
	want.lines = append(want.lines, fmt.Sprintf("%s %s 2", placedID, skuC))
	want.ledger = append(want.ledger, fmt.Sprintf("%s -2 sale %s", skuC, placedID), fmt.Sprintf("%s 2 cancel %s", skuC, placedID))
	if after.skus[skuC].available != before.skus[skuC].available || after.skus[skuC].fence <= before.skus[skuC].fence {
		t.Errorf("%s: %+v before, %+v after: want the same stock under a newer fence", skuC, before.skus[skuC], after.skus[skuC])
	}
	want.skus[skuC] = after.skus[skuC]
	want.compare(t, after)

	redisAfter := redisSnapshot(ctx, t, rdb, c.redis.Namespace)
	for _, m := range []map[string]string{redisBefore, redisAfter} {
		maps.DeleteFunc(m, func(k, _ string) bool { return strings.HasPrefix(k, keys.Tag(skuC)) })
	}
	if !maps.Equal(redisBefore, redisAfter) {
		t.Errorf("Redis changed:\nbefore %v\nafter  %v", redisBefore, redisAfter)
	}
}

// noToken is a request's header without a credential (the tests' transport
// sends the admin token otherwise).
var noToken = map[string]string{"Authorization": ""}

func send(ctx context.Context, c *http.Client, method, url, body, contentType string, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// checkProblem checks an RFC 9457 document as problem.go writes it.
func checkProblem(t *testing.T, name, path string, status int, slug string, hdr http.Header, body []byte) {
	t.Helper()
	if ct := hdr.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q", name, ct)
	}
	var p struct {
		Type     string `json:"type"`
		Title    string `json:"title"`
		Status   int    `json:"status"`
		Detail   string `json:"detail"`
		Instance string `json:"instance"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Errorf("%s: not a problem document: %v: %s", name, err, body)
		return
	}
	u, _ := url.Parse(path)
	if p.Type != httpapi.ProblemBase+slug || p.Title != problemTitles[slug] || p.Status != status || p.Instance != u.Path || p.Detail == "" {
		t.Errorf("%s: problem %+v, want type %s%s, title %q, status %d, instance %q and a detail",
			name, p, httpapi.ProblemBase, slug, problemTitles[slug], status, u.Path)
	}
	if status == http.StatusUnauthorized && hdr.Get("WWW-Authenticate") == "" {
		t.Errorf("%s: 401 without WWW-Authenticate", name)
	}
}

type skuState struct{ available, fence int64 }

// snapshot is what the database holds: stock and fences per SKU, orders and
// their status, and every order line, ledger entry and idempotency record.
type snapshot struct {
	skus        map[string]skuState
	orders      map[string]string
	lines       []string
	ledger      []string
	idempotency []string
}

func takeSnapshot(ctx context.Context, t *testing.T, db *gorm.DB) snapshot {
	t.Helper()
	db = db.WithContext(ctx)
	s := snapshot{skus: map[string]skuState{}, orders: map[string]string{}}
	var skus []struct {
		SKU              string
		Available, Fence int64
	}
	var orders []struct{ ID, Status string }
	var lines []struct {
		OrderID, SKU string
		Quantity     int64
	}
	var ledger []struct {
		SKU     string
		Delta   int64
		Kind    string
		OrderID *string
	}
	var idem []struct{ IdemKey, OrderID string }
	for _, q := range []struct {
		sql  string
		into any
	}{
		{"SELECT sku, available, fence FROM skus", &skus},
		{"SELECT id, status FROM orders", &orders},
		{"SELECT order_id, sku, quantity FROM order_lines", &lines},
		{"SELECT sku, delta, kind, order_id FROM stock_ledger ORDER BY id", &ledger},
		{"SELECT idem_key, COALESCE(order_id, '') AS order_id FROM idempotency_records", &idem},
	} {
		if err := db.Raw(q.sql).Scan(q.into).Error; err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	for _, r := range skus {
		s.skus[r.SKU] = skuState{r.Available, r.Fence}
	}
	for _, r := range orders {
		s.orders[r.ID] = r.Status
	}
	for _, r := range lines {
		s.lines = append(s.lines, fmt.Sprintf("%s %s %d", r.OrderID, r.SKU, r.Quantity))
	}
	for _, r := range ledger {
		id := ""
		if r.OrderID != nil {
			id = " " + *r.OrderID
		}
		s.ledger = append(s.ledger, fmt.Sprintf("%s %d %s%s", r.SKU, r.Delta, r.Kind, id))
	}
	for _, r := range idem {
		s.idempotency = append(s.idempotency, r.IdemKey+" "+r.OrderID)
	}
	slices.Sort(s.lines)
	slices.Sort(s.idempotency)
	return s
}

func (s snapshot) clone() snapshot {
	return snapshot{skus: maps.Clone(s.skus), orders: maps.Clone(s.orders), lines: slices.Clone(s.lines),
		ledger: slices.Clone(s.ledger), idempotency: slices.Clone(s.idempotency)}
}

func (s snapshot) compare(t *testing.T, got snapshot) {
	t.Helper()
	if !maps.Equal(s.skus, got.skus) {
		t.Errorf("skus: %v, want %v", got.skus, s.skus)
	}
	if !maps.Equal(s.orders, got.orders) {
		t.Errorf("orders: %v, want %v", got.orders, s.orders)
	}
	slices.Sort(s.lines)
	if !slices.Equal(s.lines, got.lines) {
		t.Errorf("order lines: %q, want %q", got.lines, s.lines)
	}
	if !slices.Equal(s.ledger, got.ledger) {
		t.Errorf("ledger: %q, want %q", got.ledger, s.ledger)
	}
	if !slices.Equal(s.idempotency, got.idempotency) {
		t.Errorf("idempotency records: %q, want %q", got.idempotency, s.idempotency)
	}
}

// redisSnapshot returns every key of the namespace with its type and value.
func redisSnapshot(ctx context.Context, t *testing.T, rdb *redis.Client, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	iter := rdb.Scan(ctx, 0, "{"+ns+":*", 500).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = typ
		if typ == "string" {
			out[k] += " " + rdb.Get(ctx, k).Val()
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

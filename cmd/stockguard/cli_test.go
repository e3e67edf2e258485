package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/testenv"
	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// The operators' commands against a real replica (one, on the tests'
// database and Redis): every command in table and JSON output, the
// environment's URL and key, problems as one line, the event feed read and
// followed, the audit through the API.

// sg runs "stockguard args..." with the environment env and returns what it
// printed.
func sg(ctx context.Context, env map[string]string, args ...string) (stdout, stderr string, err error) {
	var out, errs bytes.Buffer
	err = run(ctx, args, func(k string) string { return env[k] }, &out, &errs)
	return out.String(), errs.String(), err
}

// sgJSON runs a command with -o json and decodes its output into v.
func sgJSON(t *testing.T, env map[string]string, v any, args ...string) {
	t.Helper()
	out, errs, err := sg(t.Context(), env, append(args, "-o", "json")...)
	if err != nil {
		t.Fatalf("stockguard %s: %v\n%s", strings.Join(args, " "), err, errs)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("stockguard %s -o json printed %q: %v", strings.Join(args, " "), out, err)
	}
}

// sgTable runs a command (table output) and returns its lines, checking that
// the first is the header with the columns given.
func sgTable(t *testing.T, env map[string]string, header []string, args ...string) []string {
	t.Helper()
	out, errs, err := sg(t.Context(), env, args...)
	if err != nil {
		t.Fatalf("stockguard %s: %v\n%s", strings.Join(args, " "), err, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if !slices.Equal(strings.Fields(lines[0]), header) {
		t.Fatalf("stockguard %s: header %q, want the columns %q\n%s", strings.Join(args, " "), lines[0], header, out)
	}
	return lines
}

// row finds the table line whose first cell is first, and returns its cells
// (split on two spaces or more: a cell may hold one space).
func row(t *testing.T, lines []string, first string) []string {
	t.Helper()
	for _, l := range lines[1:] {
		cells := splitCells(l)
		if len(cells) > 0 && cells[0] == first {
			return cells
		}
	}
	t.Fatalf("no row %q in\n%s", first, strings.Join(lines, "\n"))
	return nil
}

func splitCells(line string) []string {
	var out []string
	for c := range strings.SplitSeq(line, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// wantProblem checks that err is one line naming the status, the problem and
// a request id.
func wantProblem(t *testing.T, err error, status int, name string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %d %s", status, name)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, fmt.Sprintf("%d %s", status, name)) || !strings.Contains(msg, "(request id ") || strings.Contains(msg, "\n") {
		t.Fatalf("error %q; want one line: %d %s ... (request id ...)", msg, status, name)
	}
}

func TestCLIStockAndLocations(t *testing.T) {
	c := startCluster(t, 1)
	env := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": adminToken}
	ctx := t.Context()
	sku := "CLI-" + testenv.RandomID()
	loc := "cli-" + strings.ToLower(testenv.RandomID())

	lines := sgTable(t, env, []string{"SKU", "AVAILABLE", "RESERVED", "SOLD", "STOCKED", "BACKORDERED", "BACKORDER", "LIMIT", "MAX/CUSTOMER", "LOW", "STOCK", "AT"},
		"stock", "restock", sku, "--quantity", "10")
	if r := row(t, lines, sku); r[1] != "10" || r[4] != "10" {
		t.Fatalf("restock's row %q: want 10 available and stocked", r)
	}
	var st sgclient.Stock
	sgJSON(t, env, &st, "stock", "set", sku, "--available", "7", "--low-stock-threshold", "2", "--expected-available", "10")
	if st.SKU != sku || st.Available != 7 || st.LowStockThreshold != 2 || st.Stocked != 7 {
		t.Fatalf("stock set: %+v", st)
	}
	_, _, err := sg(ctx, env, "stock", "set", sku, "--available", "9", "--expected-available", "10")
	wantProblem(t, err, 409, "stale-quantity")
	if !strings.Contains(err.Error(), "available now 7") {
		t.Fatalf("stale-quantity does not say the stock now: %v", err)
	}

	// The flags instead of the environment, and the flags after the SKU or before it.
	flags := []string{"--url", c.urls[0], "--api-key", adminToken}
	var got sgclient.Stock
	sgJSON(t, nil, &got, append([]string{"stock", "get", sku}, flags...)...)
	if got.Available != 7 || len(got.Locations) != 1 || got.Locations[0].Location != "default" {
		t.Fatalf("stock get: %+v", got)
	}
	var list []sgclient.Stock
	sgJSON(t, env, &list, "stock", "list")
	if !slices.ContainsFunc(list, func(s sgclient.Stock) bool { return s.SKU == sku && s.Available == 7 }) {
		t.Fatalf("stock list has no %s with 7: %+v", sku, list)
	}
	row(t, sgTable(t, env, stockHeaderFields(), "stock", "list"), sku)

	// Locations.
	locHeader := []string{"ID", "NAME", "PRIORITY", "ACTIVE", "CREATED"}
	if r := row(t, sgTable(t, env, locHeader, "locations", "create", "--id", loc, "--name", "Berlin DC", "--priority", "5"), loc); r[1] != "Berlin DC" || r[2] != "5" || r[3] != "true" {
		t.Fatalf("locations create's row %q", r)
	}
	var l sgclient.Location
	sgJSON(t, env, &l, "locations", "update", loc, "--active=false")
	if l.ID != loc || l.Active || l.Name != "Berlin DC" {
		t.Fatalf("locations update --active=false: %+v", l)
	}
	sgJSON(t, env, &l, "locations", "update", "--active", "--priority", "3", loc)
	if !l.Active || l.Priority != 3 {
		t.Fatalf("locations update --active --priority 3: %+v", l)
	}
	sgJSON(t, env, &l, "locations", "get", loc)
	if l.ID != loc || l.Priority != 3 {
		t.Fatalf("locations get: %+v", l)
	}
	var locs []sgclient.Location
	sgJSON(t, env, &locs, "locations", "list")
	if len(locs) < 2 || !slices.ContainsFunc(locs, func(l sgclient.Location) bool { return l.ID == "default" }) {
		t.Fatalf("locations list: %+v", locs)
	}
	row(t, sgTable(t, env, locHeader, "locations", "list"), "default")
	_, _, err = sg(ctx, env, "locations", "create", "--id", loc, "--name", "again")
	wantProblem(t, err, 409, "location-exists")

	// Units in the new location, moved back; too many refused.
	sgJSON(t, env, &st, "stock", "restock", sku, "--quantity", "4", "--location", loc, "--idempotency-key", "cli-restock-"+sku)
	if st.Available != 11 || locAvailable(st, loc) != 4 {
		t.Fatalf("restock --location: %+v", st)
	}
	sgJSON(t, env, &st, "stock", "restock", sku, "--quantity", "4", "--location", loc, "--idempotency-key", "cli-restock-"+sku)
	if st.Available != 11 {
		t.Fatalf("restock with the same --idempotency-key added again: %+v", st)
	}
	_, _, err = sg(ctx, env, "stock", "transfer", sku, "--from", loc, "--to", "default", "--quantity", "1000")
	wantProblem(t, err, 409, "insufficient-stock")
	lines = sgTable(t, env, []string{"SKU", "AVAILABLE", "RESERVED", "SOLD", "STOCKED", "BACKORDERED", "BACKORDER", "LIMIT", "MAX/CUSTOMER", "LOW", "STOCK", "AT"},
		"stock", "transfer", sku, "--from", loc, "--to", "default", "--quantity", "3")
	if r := row(t, lines, loc); r[1] != "1" {
		t.Fatalf("after the transfer, %s's row %q: want 1 available\n%s", loc, r, strings.Join(lines, "\n"))
	}
	if r := row(t, lines, "default"); r[1] != "10" {
		t.Fatalf("after the transfer, default's row %q: want 10 available", r)
	}
	sgJSON(t, env, &st, "stock", "set", sku, "--location", loc, "--available", "0")
	if locAvailable(st, loc) != 0 || st.Available != 10 {
		t.Fatalf("stock set --location: %+v", st)
	}
	_, _, err = sg(ctx, env, "stock", "set", sku, "--location", loc, "--available", "1", "--backorder-limit", "5")
	if err == nil || !strings.Contains(err.Error(), "without --location") {
		t.Fatalf("stock set --location with a SKU's limit: %v", err)
	}
	_, _, err = sg(ctx, env, "stock", "get", sku+"-none")
	wantProblem(t, err, 404, "not-found")
	_, _, err = sg(ctx, env, "stock", "set", sku, "--available", "-1")
	wantProblem(t, err, 422, "invalid")
	if n := strings.Count(err.Error(), "available: must be"); n != 1 {
		t.Fatalf("the invalid field is named %d times, want once: %v", n, err)
	}
}

func stockHeaderFields() []string { return strings.Fields(strings.Join(stockHeader, " ")) }

func locAvailable(st sgclient.Stock, loc string) int {
	for _, l := range st.Locations {
		if l.Location == loc {
			return l.Available
		}
	}
	return -1
}

// A wrong key is 401 on one line, and neither it nor the right one shows in
// an error or in --help.
func TestCLICredentials(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	const wrong = "sk_sg_wrong-key-never-printed"
	out, errs, err := sg(ctx, map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": wrong}, "stock", "list")
	wantProblem(t, err, 401, "unauthorized")
	if strings.Contains(out+errs+err.Error(), wrong) {
		t.Fatalf("the key shows: %q %q %v", out, errs, err)
	}
	_, _, err = sg(ctx, map[string]string{"STOCKGUARD_URL": c.urls[0]}, "locations", "list")
	wantProblem(t, err, 401, "unauthorized")
	for _, args := range [][]string{{"stock", "get", "--help"}, {"clients", "create", "--help"}, {"audit", "--help"}, {"events", "tail", "--help"}} {
		_, help, err := sg(ctx, map[string]string{"STOCKGUARD_API_KEY": wrong, "DATABASE_URL": "postgres://u:dbsecret@h/db"}, args...)
		if !errors.Is(err, flag.ErrHelp) || strings.Contains(help, wrong) || strings.Contains(help, "dbsecret") || !strings.Contains(help, "($STOCKGUARD_API_KEY)") {
			t.Fatalf("%v: %v; help shows a secret or lacks $STOCKGUARD_API_KEY:\n%s", args, err, help)
		}
	}
}

// Clients and keys through the API, and a client's key used by the commands:
// what its scopes allow passes, the rest is 403.
func TestCLIClientsAndKeysThroughTheAPI(t *testing.T) {
	c := startCluster(t, 1)
	ctx := t.Context()
	env := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": adminToken, "DATABASE_URL": "sqlite:/nonexistent/never-opened.db"}
	var made struct {
		sgclient.APIClient
		Key sgclient.APIKey `json:"key"`
	}
	sgJSON(t, env, &made, "clients", "create", "--name", "reader", "--scopes", "stock:read", "--rate-limit", "50", "--rate-burst", "60", "--with-key")
	if !strings.HasPrefix(made.ID, "cli_") || !strings.HasPrefix(made.Key.Secret, "sk_sg_") || made.RateLimit.Burst != 60 || !slices.Equal(made.Scopes, []string{"stock:read"}) {
		t.Fatalf("clients create --with-key: %+v", made)
	}
	clientHead := []string{"ID", "NAME", "SCOPES", "MAX", "HELD/SKU", "RATE/S", "BURST", "CREATED"}
	if r := row(t, sgTable(t, env, clientHead, "clients", "get", made.ID), made.ID); r[1] != "reader" || r[2] != "stock:read" || r[4] != "50" {
		t.Fatalf("clients get's row %q", r)
	}
	var upd sgclient.APIClient
	sgJSON(t, env, &upd, "clients", "update", made.ID, "--name", "reader-2", "--scopes", "stock:read,events:read")
	if upd.Name != "reader-2" || len(upd.Scopes) != 2 || upd.RateLimit.Burst != 60 {
		t.Fatalf("clients update: %+v", upd)
	}
	var all []sgclient.APIClient
	sgJSON(t, env, &all, "clients", "list")
	if !slices.ContainsFunc(all, func(a sgclient.APIClient) bool { return a.ID == made.ID && a.Name == "reader-2" }) {
		t.Fatalf("clients list: %+v", all)
	}
	_, _, err := sg(ctx, env, "clients", "create", "--name", "x", "--scopes", "no:such")
	wantProblem(t, err, 422, "invalid")

	keyHead := []string{"ID", "CLIENT", "HINT", "CREATED", "REVOKED", "SECRET", "(SHOWN", "ONCE)"}
	if lines := sgTable(t, env, keyHead, "keys", "create", "--client", made.ID); len(lines) != 2 ||
		!strings.HasPrefix(splitCells(lines[1])[0], "key_") || !strings.HasPrefix(splitCells(lines[1])[5], "sk_sg_") {
		t.Fatalf("keys create printed %q; want the key with its secret", lines)
	}
	var keys []sgclient.APIKey
	sgJSON(t, env, &keys, "keys", "list", "--client", made.ID)
	if len(keys) != 2 || keys[0].Secret != "" {
		t.Fatalf("keys list: %+v; want two keys without secrets", keys)
	}

	// The client's own key: stock:read passes, a write is 403.
	as := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": made.Key.Secret}
	if _, errs, err := sg(ctx, as, "stock", "list"); err != nil {
		t.Fatalf("stock list with a stock:read key: %v\n%s", err, errs)
	}
	_, _, err = sg(ctx, as, "stock", "restock", "X-1", "--quantity", "1")
	wantProblem(t, err, 403, "forbidden")
	if !strings.Contains(err.Error(), "needs a scope of") {
		t.Fatalf("403 does not name the scopes: %v", err)
	}

	lines := sgTable(t, env, []string{"REVOKED"}, "keys", "revoke", "--client", made.ID, "--key", made.Key.ID)
	if strings.TrimSpace(lines[1]) != made.Key.ID {
		t.Fatalf("keys revoke printed %q", lines)
	}
	_, _, err = sg(ctx, env, "keys", "revoke", "--client", made.ID, "--key", "key_0")
	wantProblem(t, err, 404, "not-found")
}

// The database mode is what it was without --url and $STOCKGUARD_URL, a key
// in the environment or not; with --url the same command line goes through
// the API.
func TestCLIClientsDatabaseMode(t *testing.T) {
	ctx := t.Context()
	env := map[string]string{"DATABASE_URL": "sqlite:" + t.TempDir() + "/c.db", "STOCKGUARD_API_KEY": "ignored"}
	out, _, err := sg(ctx, env, "clients", "create", "--name", "db", "--scopes", "stock:read")
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal([]byte(out), &c); err != nil || !strings.HasPrefix(out, "{\n  \"id\": \"cli_") {
		t.Fatalf("database mode printed %q (%v); want the client as indented JSON", out, err)
	}
	out, _, err = sg(ctx, env, "clients", "list", "-o", "json")
	if err != nil || !strings.HasPrefix(out, "[\n  {\n") || !strings.Contains(out, c["id"].(string)) {
		t.Fatalf("clients list in the database mode: %v %q", err, out)
	}
	if _, _, err := sg(ctx, env, "clients", "list", "-o", "table"); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("-o table in the database mode: %v", err)
	}
	if _, _, err := sg(ctx, env, "clients", "get", c["id"].(string)); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("clients get in the database mode: %v", err)
	}
	// --url on the command line: the API, refused here (nothing listens).
	_, _, err = sg(ctx, env, "clients", "list", "--url", "http://127.0.0.1:1", "--timeout", "1ms")
	if err == nil || strings.Contains(err.Error(), "sqlite") || strings.Contains(err.Error(), "database") {
		t.Fatalf("clients list --url went elsewhere than the API: %v", err)
	}
}

func TestCLIWebhooks(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	c := startCluster(t, 1, "STOCKGUARD_WEBHOOK_ALLOW_NETWORKS=127.0.0.0/8")
	ctx := t.Context()
	env := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": adminToken}
	var made sgclient.WebhookCreated
	sgJSON(t, env, &made, "webhooks", "create", "--endpoint", hook.URL+"/stock")
	if !strings.HasPrefix(made.ID, "wh_") || !strings.HasPrefix(made.Secret, "whsec_") {
		t.Fatalf("webhooks create: %+v", made)
	}
	head := []string{"ID", "URL", "DISABLED", "REASON", "DISABLED", "AT", "CREATED"}
	var w sgclient.Webhook
	sgJSON(t, env, &w, "webhooks", "disable", made.ID)
	if !w.Disabled || w.DisabledReason != "manual" {
		t.Fatalf("webhooks disable: %+v", w)
	}
	if r := row(t, sgTable(t, env, head, "webhooks", "get", made.ID), made.ID); r[2] != "true" || r[3] != "manual" {
		t.Fatalf("webhooks get's row after disable: %q", r)
	}
	if r := row(t, sgTable(t, env, head, "webhooks", "enable", made.ID), made.ID); r[2] != "false" {
		t.Fatalf("webhooks enable's row: %q", r)
	}
	var ws []sgclient.Webhook
	sgJSON(t, env, &ws, "webhooks", "list")
	if len(ws) != 1 || ws[0].ID != made.ID || ws[0].Disabled {
		t.Fatalf("webhooks list: %+v", ws)
	}
	var fails []sgclient.WebhookFailure
	sgJSON(t, env, &fails, "webhooks", "failures", made.ID)
	if fails == nil || len(fails) != 0 {
		t.Fatalf("webhooks failures: %+v; want an empty array", fails)
	}
	sgTable(t, env, []string{"EVENT", "ATTEMPTS", "FIRST", "ATTEMPT", "FAILED", "LAST", "ERROR"}, "webhooks", "failures", made.ID)
	sgTable(t, env, []string{"DELETED"}, "webhooks", "delete", made.ID)
	_, _, err := sg(ctx, env, "webhooks", "get", made.ID)
	wantProblem(t, err, 404, "not-found")
}

// lineWriter is a stdout that a test reads while a command writes it: each
// complete line goes to lines.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}

// events tail --follow prints an event already in the feed, then one made
// after it (by a restock run once the first was printed), and ends without
// an error when its context is cancelled; events tail then reads both, as
// JSON Lines and as a table, filtered by SKU and by type.
func TestCLIEventsTail(t *testing.T) {
	c := startCluster(t, 1)
	env := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": adminToken}
	sku := "EV-" + testenv.RandomID()
	if _, errs, err := sg(t.Context(), env, "stock", "restock", sku, "--quantity", "5"); err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := &lineWriter{lines: make(chan string, 16)}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"events", "tail", "-f", "--sku", sku, "-o", "json", "--interval", "20ms"},
			func(k string) string { return env[k] }, out, io.Discard)
	}()
	next := func() sgclient.Event {
		t.Helper()
		select {
		case l := <-out.lines:
			var ev sgclient.Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("events tail -o json printed %q: %v", l, err)
			}
			return ev
		case err := <-done:
			t.Fatalf("events tail -f ended: %v", err)
		case <-ctx.Done():
			t.Fatal("events tail -f printed nothing within a minute")
		}
		return sgclient.Event{}
	}
	if ev := next(); ev.SKU != sku || ev.Type != sgclient.EventStockRestocked || ev.Quantity != 5 || ev.Seq != 1 {
		t.Fatalf("first event followed: %+v", ev)
	}
	if _, errs, err := sg(t.Context(), env, "stock", "restock", sku, "--quantity", "2"); err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	if ev := next(); ev.SKU != sku || ev.Type != sgclient.EventStockRestocked || ev.Quantity != 2 || ev.Seq != 2 || ev.Counters.Available != 7 {
		t.Fatalf("event made while following: %+v", ev)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events tail -f, cancelled: %v", err)
	}

	// The feed has both now: read to its end, JSON Lines and a table.
	lines, errs, err := sg(t.Context(), env, "events", "tail", "--sku", sku, "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	var evs []sgclient.Event
	for l := range strings.SplitSeq(strings.TrimRight(lines, "\n"), "\n") {
		var ev sgclient.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("events tail -o json: line %q: %v", l, err)
		}
		evs = append(evs, ev)
	}
	if len(evs) != 2 || evs[0].Quantity != 5 || evs[1].Quantity != 2 {
		t.Fatalf("events tail --sku: %+v", evs)
	}
	table := sgTable(t, env, []string{"ID", "CREATED", "TYPE", "SKU", "SEQ", "QUANTITY", "LOCATION", "CHANGE", "a/r/s/st", "COUNTERS", "a/r/s/st", "ORDER/HOLD"},
		"events", "tail", "--after", evs[0].ID, "--type", sgclient.EventStockRestocked, "--sku", sku)
	if len(table) != 2 {
		t.Fatalf("events tail --after the first: %q", table)
	}
	if f := strings.Fields(table[1]); f[0] != evs[1].ID || f[2] != sgclient.EventStockRestocked || f[3] != sku || f[5] != "2" || f[7] != "+2/+0/+0/+2" || f[8] != "7/0/0/7" {
		t.Fatalf("event row %q", table[1])
	}
	if out, _, err := sg(t.Context(), env, "events", "tail", "--sku", sku, "--type", "order.placed"); err != nil || out != "" {
		t.Fatalf("events tail --type order.placed printed %q (%v); want nothing", out, err)
	}
}

// audit through the API: consistent passes, in a table and in JSON, deep
// or not; a counter changed behind the service's back fails the deep audit
// with a non-zero exit, as the database mode does.
func TestCLIAuditThroughTheAPI(t *testing.T) {
	c := startCluster(t, 1)
	env := map[string]string{"STOCKGUARD_URL": c.urls[0], "STOCKGUARD_API_KEY": adminToken}
	sku := "AU-" + testenv.RandomID()
	if _, errs, err := sg(t.Context(), env, "stock", "restock", sku, "--quantity", "5"); err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	var a sgclient.Audit
	sgJSON(t, env, &a, "audit", "--deep")
	if !a.Consistent || !a.Deep || len(a.SKUs) != 1 || a.SKUs[0].SKU != sku || a.SKUs[0].Recounted == nil {
		t.Fatalf("audit --deep: %+v", a)
	}
	head := []string{"SKU", "AVAILABLE", "RESERVED", "SOLD", "STOCKED", "OVERSOLD", "CONSISTENT"}
	if r := row(t, sgTable(t, env, head, "audit"), sku); r[1] != "5" || r[6] != "true" {
		t.Fatalf("audit's row %q", r)
	}

	db, err := gormstore.Open(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := db.Exec("UPDATE skus SET sold = sold + 1, available = available - 1 WHERE sku = ?", sku).Error; err != nil {
		t.Fatal(err)
	}
	out, _, err := sg(t.Context(), env, "audit", "--deep", "-o", "json")
	if err == nil || !strings.Contains(err.Error(), "not consistent") {
		t.Fatalf("audit --deep of counters off the history: %v; want a failure", err)
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Consistent || a.SKUs[0].Consistent {
		t.Fatalf("audit --deep printed %+v (%v); want consistent false", a, err)
	}
}

// The client's errors, each one line an operator can act on.
func TestCLIExplainsErrors(t *testing.T) {
	p := &sgclient.Problem{Type: "https://stockguard.dev/problems#insufficient-stock", Status: 409, Detail: "not enough\nstock",
		SKUs: []string{"A-1"}, Available: map[string]int{"A-1": 3}, RequestID: "req-1"}
	got := explain(&sgclient.RetryError{Op: "placeOrder", Attempts: 3, Err: p}).Error()
	if want := "409 insufficient-stock: not enough stock; skus A-1; A-1 available 3 (request id req-1) (after 3 attempts)"; got != want {
		t.Fatalf("problem: %q\nwant       %q", got, want)
	}
	got = explain(&sgclient.OutcomeUnknownError{Op: "restock", IdempotencyKey: "k-42", Attempts: 4,
		Err: &sgclient.Problem{Type: "https://stockguard.dev/problems#outcome-unknown", Status: 503, Title: "Outcome unknown"}}).Error()
	if !strings.Contains(got, "send the same command again with --idempotency-key k-42") || !strings.Contains(got, "503 outcome-unknown") {
		t.Fatalf("outcome unknown: %q", got)
	}
	got = explain(&sgclient.OutcomeUnknownError{Op: "createLocation", Attempts: 1, Err: io.ErrUnexpectedEOF}).Error()
	if !strings.Contains(got, "list or get") || strings.Contains(got, "--idempotency-key") {
		t.Fatalf("outcome unknown without a key: %q", got)
	}
}

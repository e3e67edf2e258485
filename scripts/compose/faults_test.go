//go:build compose

package compose

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// The fault round's load: a few SKUs with more stock than the round sells, so
// that orders are accepted before, during and after each fault.
const (
	faultSKUs     = 4
	faultStock    = 40000
	faultDuration = 60 * time.Second
	faultGap      = 500 // units sold between two steps
)

// loadSummary is what the fault round reads of the load generator's summary.
type loadSummary struct {
	Accepted float64 `json:"orders_accepted"`
	Reqs     float64 `json:"http_reqs"`
	Oversold float64 `json:"oversold"`
	Audit    struct {
		Unsettled  int64    `json:"orders_unsettled"`
		ClientSold int64    `json:"units_sold_client"`
		ServerSold int64    `json:"units_sold_server"`
		Oversold   int64    `json:"oversold"`
		Consistent bool     `json:"server_consistent"`
		Mismatches []string `json:"mismatches"`
	} `json:"audit"`
}

// faultRound runs the load generator (in the demo's image, on the stack's
// network) through nginx, and while it runs kills replica2 and restarts Redis,
// each fault only once orders are seen accepted since the one before. Then:
// the thresholds passed (0 oversold), the audit is consistent, every unit the
// clients were told was sold is in PostgreSQL (read directly), and the stack
// recovers: every service healthy, an order accepted.
//
// The load generator's orders and reads carry key, a client's (the test's
// own); its seeding and audit the admin token.
func faultRound(ctx context.Context, t *testing.T, dc func(...string) []string, key string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // the load generator runs as an unprivileged user
		t.Fatal(err)
	}
	prefix := "faults-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	streamBefore, err := streamMessages(ctx, dc)
	if err != nil {
		t.Fatal(err)
	}
	// The key by name only: compose takes its value from its own environment,
	// so that it is on no command line.
	load := command(ctx, dc("run", "--rm", "--no-deps", "-T", "-v", dir+":/out", "-e", "STOCKGUARD_API_KEY", "--entrypoint", "/usr/local/bin/loadtest", "demo",
		"-url", "http://nginx:8080", "-admin-token", adminToken, "-vus", "32", "-duration", faultDuration.String(),
		"-skus", strconv.Itoa(faultSKUs), "-stock", strconv.Itoa(faultStock), "-prefix", prefix, "-cancel", "0.05", "-retry", "0.2",
		"-threshold", "oversold:count==0", "-summary-json", "/out/summary.json", "-quiet")...)
	load.Env = append(load.Env, "STOCKGUARD_API_KEY="+key)
	var out strings.Builder
	load.Stdout, load.Stderr = &out, &out
	if err := load.Start(); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan struct{})
	var loadErr error
	go func() { loadErr = load.Wait(); close(loadDone) }()
	started := time.Now()

	ids, err := containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each fault only once the service has sold faultGap more units since the
	// last step: the load is running, then the survivors take orders without
	// replica2, then orders flow again after Redis came back. The load's end
	// bounds each wait.
	soldBefore := waitSoldMore(ctx, t, prefix, key, 0, loadDone, "the load to sell")
	t.Logf("%.1fs: %d units sold; docker kill replica2", time.Since(started).Seconds(), soldBefore)
	run(ctx, t, "docker", "kill", ids["replica2"])
	soldBefore = waitSoldMore(ctx, t, prefix, key, soldBefore, loadDone, "orders accepted without replica2")
	t.Logf("%.1fs: %d units sold; docker restart redis", time.Since(started).Seconds(), soldBefore)
	run(ctx, t, "docker", "restart", "-t", "2", ids["redis"])
	soldBefore = waitSoldMore(ctx, t, prefix, key, soldBefore, loadDone, "orders accepted after Redis restarted")
	t.Logf("%.1fs: %d units sold after Redis restarted; starting replica2 again", time.Since(started).Seconds(), soldBefore)
	run(ctx, t, dc("start", "replica2")...) // as an orchestrator would; a no-op if the engine already did
	waitHealthy(ctx, t, 2*time.Minute)
	t.Logf("%.1fs: every service healthy again", time.Since(started).Seconds())
	select {
	case <-loadDone:
		if time.Since(started) < faultDuration {
			t.Fatalf("the load ended before its %s:\n%s", faultDuration, tail(out.String(), 30))
		}
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	t.Logf("load generator:\n%s", tail(out.String(), 40))
	if loadErr != nil {
		t.Errorf("the load generator failed (99: a threshold, oversold:count==0): %v", loadErr)
	}

	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s loadSummary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	a := s.Audit
	t.Logf("fault round: %.0f requests, %.0f orders accepted, units sold %d (clients) / %d (service), %d unsettled, oversold %d",
		s.Reqs, s.Accepted, a.ClientSold, a.ServerSold, a.Unsettled, a.Oversold)
	if a.Oversold != 0 || s.Oversold != 0 || !a.Consistent || len(a.Mismatches) > 0 {
		t.Errorf("fault round audit: oversold %d (%v), consistent %v, mismatches %v", a.Oversold, s.Oversold, a.Consistent, a.Mismatches)
	}
	if s.Accepted == 0 {
		t.Error("fault round: no order accepted")
	}

	// The stock events reached JetStream through the faults: each accepted
	// order wrote at least one, and the relay (on whichever replica leads it,
	// through replica2's death and Redis's restart) delivered them all.
	waitStreamHolds(ctx, t, dc, streamBefore+int64(s.Accepted), "the fault round's orders' events")

	// Every acknowledged unit is in PostgreSQL, read directly: the live orders'
	// lines of the round's SKUs. An order whose answer was lost and could not be
	// asked about again (unsettled) may be there without the client knowing.
	q := fmt.Sprintf(`select coalesce(sum(l.quantity), 0) from order_lines l join orders o on o.id = l.order_id
		where o.status <> 'cancelled' and l.sku like '%s-%%'`, prefix)
	dbSold, err := strconv.ParseInt(strings.TrimSpace(output(ctx, t, dc("exec", "-T", "postgres", "psql", "-U", "stockguard",
		"-d", "stockguard", "-tAc", q)...)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if dbSold != a.ServerSold || dbSold < a.ClientSold || (a.Unsettled == 0 && dbSold != a.ClientSold) {
		t.Errorf("PostgreSQL holds %d units sold of the round's SKUs; the service says %d, the clients were told %d (%d unsettled)",
			dbSold, a.ServerSold, a.ClientSold, a.Unsettled)
	} else {
		t.Logf("PostgreSQL, read directly: %d units sold, every acknowledged one", dbSold)
	}

	// Recovered: an order through nginx is accepted.
	sku := prefix + "-after"
	if _, err := api(t, adminToken).Restock(ctx, sku, client.RestockRequest{Quantity: 1}); err != nil {
		t.Fatalf("restock after the faults: %v", err)
	}
	if _, err := api(t, key).PlaceOrder(ctx, client.OrderRequest{Items: []client.Item{{SKU: sku, Quantity: 1}}}); err != nil {
		t.Errorf("an order after the faults: %v, want 201", err)
	}
}

// waitSoldMore waits until the round's SKUs have sold more than before, and
// returns what they sold; the load's end (or a minute) is its deadline.
func waitSoldMore(ctx context.Context, t *testing.T, prefix, key string, before int64, loadDone <-chan struct{}, what string) int64 {
	t.Helper()
	deadline := time.After(time.Minute)
	var last error
	for {
		var total int64
		var err error
		shop := api(t, key)
		for i := range faultSKUs {
			var st *client.Stock
			if st, err = shop.GetSKU(ctx, fmt.Sprintf("%s-%d", prefix, i)); err != nil {
				break
			}
			total += int64(st.Sold)
		}
		if err == nil && total >= before+faultGap {
			return total
		}
		last = err
		select {
		case <-loadDone:
			t.Fatalf("the load ended while waiting for %s (last error: %v)", what, last)
		case <-deadline:
			t.Fatalf("a minute without %s (last error: %v)", what, last)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

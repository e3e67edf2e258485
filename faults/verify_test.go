//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// loadRun is the load generator (loadtest/) driving one hot SKU through the
// balancer for a fixed time, then settling lost answers and auditing.
type loadRun struct {
	c       *cluster
	sku     string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	out     string // its text output
	summary string // its JSON summary
	bound   time.Duration
	spread  bool      // a second scenario orders over other SKUs (startLoadSpread)
	ends    time.Time // when its scenarios' duration ends (its settling and audit come after)
}

// loadSummary is what the tests read of the generator's JSON summary.
type loadSummary struct {
	Reqs     int64 `json:"http_reqs"`
	Accepted int64 `json:"orders_accepted"`
	Refused  int64 `json:"orders_refused"`
	Oversold int64 `json:"oversold"`
	Audit    struct {
		Unsettled    int64    `json:"orders_unsettled"`
		Stocked      int64    `json:"units_stocked"`
		ClientSold   int64    `json:"units_sold_client"`
		ServerSold   int64    `json:"units_sold_server"`
		Consistent   bool     `json:"server_consistent"`
		Mismatches   []string `json:"mismatches"`
		ServerAudit  bool     `json:"server_audit"`
		AuditProblem string   `json:"audit_problem"`
		// Events is the audit of the feed, with cluster.auditEvents.
		Events *struct {
			Run      int      `json:"events_run_skus"`
			Told     bool     `json:"told"`
			Problems []string `json:"problems"`
		} `json:"events"`
	} `json:"audit"`
}

// hotStock is the hot SKU's stock: more than the load sells in the tests' runs
// on the development machine, so that writes (and so the fence) go on through
// every fault. A run that sells out still checks every invariant.
const hotStock = 200000

// spreadSKUs is how many SKUs startLoadSpread's second scenario orders over.
const spreadSKUs = 8

// startLoad runs the generator for d with vus virtual users on one hot SKU:
// up to 3 units an order, 10% retried with the same Idempotency-Key (30% of
// those after abandoning the first attempt), 5% cancelled.
func (c *cluster) startLoad(d time.Duration, vus int) *loadRun { return c.startLoadSpread(d, vus, 0) }

// startLoadSpread is startLoad with, when spreadVUs > 0, a second scenario
// alongside: spreadVUs virtual users ordering over spreadSKUs SKUs of their own,
// half the orders with two or three SKUs (in a Redis Cluster, mostly of several
// slots), retried and cancelled as the hot ones are.
func (c *cluster) startLoadSpread(d time.Duration, vus, spreadVUs int) *loadRun {
	t := c.t
	t.Helper()
	dir := t.TempDir()
	prefix := "hot" + c.id
	scenarios := map[string]any{"hot": map[string]any{
		"executor": "constant-vus", "vus": vus, "duration": d.String(),
		"workload": map[string]any{"skus": 1, "stock": hotStock, "maxQuantity": 3, "retry": 0.1, "abandonFirst": 0.3,
			"cancel": 0.05, "prefix": prefix},
	}}
	if spreadVUs > 0 {
		scenarios["spread"] = map[string]any{
			"executor": "constant-vus", "vus": spreadVUs, "duration": d.String(),
			"workload": map[string]any{"skus": spreadSKUs, "stock": hotStock, "maxQuantity": 3, "multiSKU": 0.5, "retry": 0.1,
				"abandonFirst": 0.3, "cancel": 0.05, "prefix": "spread" + c.id},
		}
	}
	cfg := map[string]any{
		"baseURL": c.lb.url, "adminToken": adminToken, "timeout": clientTimeout.String(),
		"scenarios":  scenarios,
		"thresholds": map[string]any{"oversold": []string{"count==0"}},
	}
	if c.auditEvents {
		cfg["auditEvents"] = true
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "scenario.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c.hot = prefix + "-0"
	c.lb.mu.Lock()
	c.lb.hot = c.hot
	c.lb.mu.Unlock()
	l := &loadRun{c: c, sku: c.hot, done: make(chan struct{}), out: filepath.Join(dir, "loadtest.txt"),
		summary: filepath.Join(dir, "summary.json"), spread: spreadVUs > 0, ends: time.Now().Add(d)}
	// Its own duration, a graceful stop and the settling of lost answers, at most.
	l.bound = d + 3*time.Minute
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), l.bound)
	l.cmd = exec.CommandContext(ctx, loadtestBinary, "-config", cfgPath, "-summary-json", l.summary, "-quiet")
	outFile, err := os.Create(l.out)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	l.cmd.Stdout, l.cmd.Stderr = outFile, outFile
	if err := l.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		l.err = l.cmd.Wait()
		_ = outFile.Close()
		cancel()
		close(l.done)
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			_ = l.cmd.Process.Kill()
			<-l.done
		}
	})
	return l
}

// stop ends the load before its duration (SIGINT): the generator stops its
// scenarios and still settles, audits and writes its summary, as at the end of
// its duration. For a test whose phases take as long as the machine makes
// them: its load runs until the test has seen what it waits for.
func (l *loadRun) stop() {
	select {
	case <-l.done:
	default:
		_ = l.cmd.Process.Signal(os.Interrupt)
	}
}

// finish ends the load once the replicas have decided n more orders, or at
// the end of its duration if that comes first, and returns its summary
// (wait). A test calls it once its fault is over: what the load is for after
// that, orders decided again on every path the fault touched, is n decisions,
// not the rest of a duration chosen long enough for a slow machine to reach
// them; the duration stays the most the load runs.
func (l *loadRun) finish(n int) loadSummary {
	target := l.c.lb.decisionCount(anyReplica) + n
	for l.c.lb.decisionCount(anyReplica) < target {
		select {
		case <-l.done: // its duration is up
			return l.wait()
		case <-time.After(10 * time.Millisecond): // polling the balancer's count, until the load ends
		}
	}
	l.stop()
	return l.wait()
}

// waitTraffic waits until replicas have decided n orders (sold or refused for
// want of stock, under the lock) since the run started.
func (l *loadRun) waitTraffic(n int) {
	waitFor(l.c.t, 60*time.Second, fmt.Sprintf("%d orders decided", n), func() bool {
		return l.c.lb.decisionCount(anyReplica) >= n
	})
}

// wait waits for the generator to end and returns its summary; it fails the
// test when the generator failed or found an oversell (its threshold).
func (l *loadRun) wait() loadSummary {
	t := l.c.t
	t.Helper()
	<-l.done
	out, _ := os.ReadFile(l.out)
	var exit *exec.ExitError
	switch {
	case l.err == nil:
	case errors.As(l.err, &exit) && exit.ExitCode() == 99:
		t.Errorf("the load generator's thresholds failed (oversold):\n%s", out)
	default:
		t.Fatalf("load generator: %v\n%s", l.err, out)
	}
	var s loadSummary
	b, err := os.ReadFile(l.summary)
	if err != nil {
		t.Fatalf("no summary: %v\n%s", err, out)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	t.Logf("load generator:\n%s", out)
	return s
}

// verify checks I1-I4 after the load: through the API (GET /v1/audit, GET
// /v1/orders/{id} for every order acknowledged) and in the database (I1 per SKU,
// every acknowledged order stored, fencing tokens per SKU never going down in
// the ledger), and that the cache converges to the database or is absent. It
// fills r's figures; every violation fails the test.
func (c *cluster) verify(r *result, s loadSummary) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitFor(t, 30*time.Second, "no request in flight at the balancer", func() bool { return c.lb.inFlight.Load() == 0 })

	r.Reqs, r.Unsettled = s.Reqs, s.Audit.Unsettled
	r.Oversold = s.Oversold
	if !s.Audit.ServerAudit || !s.Audit.Consistent || s.Oversold != 0 {
		t.Errorf("the load generator's audit: %+v, oversold %d", s.Audit, s.Oversold)
	}
	if s.Audit.Unsettled == 0 && len(s.Audit.Mismatches) > 0 {
		t.Errorf("clients and the service disagree on what was sold: %v", s.Audit.Mismatches)
	}
	if s.Accepted == 0 {
		t.Errorf("the load generator had no order accepted: the run proves nothing")
	}

	// I1 through the API.
	var audit orders.Audit
	// A 503 says "try again" (a replica still reconnecting after a fault, a deep
	// recount past its deadline on a busy machine): asked again, for 30 s at most.
	var status int
	var b []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		status, b, err = get(ctx, c.lb.url+"/v1/audit?deep=true", map[string]string{"Authorization": "Bearer " + adminToken})
		if (err == nil && status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			break
		}
		hold(200 * time.Millisecond) // asking again, with a deadline
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(b, &audit) != nil {
		t.Fatalf("GET /v1/audit: %d %v %s", status, err, b)
	}
	r.Oversold = max(r.Oversold, audit.Oversold)
	if !audit.Consistent || audit.Oversold != 0 {
		t.Errorf("GET /v1/audit: %+v", audit)
	}

	// I2 through the API: every acknowledged order is there.
	ids := c.lb.ackedIDs()
	r.Acknowledged = len(ids)
	c.lb.mu.Lock()
	r.Replays = c.lb.replays
	c.lb.mu.Unlock()
	missing := c.missingFromAPI(ctx, ids)

	// I1 and I2 in the database: the counters, and the counters against the
	// history (the deep audit).
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
		if st.Available < 0 || st.Held < 0 || st.Stocked-st.Sold-st.Held != st.Available {
			t.Errorf("I1 in the database, %s: stocked %d - sold %d - reserved %d != available %d", st.SKU, st.Stocked, st.Sold, st.Held, st.Available)
		}
	}
	c.checkLocations(ctx) // and per location
	for _, id := range c.missingFromDB(ctx, ids) {
		missing[id] = true
	}
	r.LostAcked = len(missing)
	if len(missing) > 0 {
		t.Errorf("%d acknowledged orders are missing (I2): %v", len(missing), sample(missing))
	}

	// I3: committed fencing tokens strictly increase per SKU from one commit to the next.
	r.FencesMonotonic = c.fencesMonotonic(ctx, r)

	// I4: the cache converges to the database, or is absent.
	r.CacheConverged = c.cacheConverges(ctx, stocks)

	r.FenceRejections = c.total(mFenceRejections)
	r.LeasesLost = c.total(mLeasesLost)
	r.Errors = c.lb.errors5xx(anyReplica)
}

func (c *cluster) missingFromAPI(ctx context.Context, ids []string) map[string]bool {
	t := c.t
	missing := map[string]bool{}
	var mu sync.Mutex
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range jobs {
				status, b, err := get(ctx, c.lb.url+"/v1/orders/"+id, nil)
				for try := 0; (err != nil || status >= 500) && try < 20; try++ {
					hold(100 * time.Millisecond) // a replica still recovering: ask again
					status, b, err = get(ctx, c.lb.url+"/v1/orders/"+id, nil)
				}
				switch {
				case err == nil && status == http.StatusOK:
				case err == nil && status == http.StatusNotFound:
					mu.Lock()
					missing[id] = true
					mu.Unlock()
				default:
					t.Errorf("GET /v1/orders/%s: %d %v %s", id, status, err, b)
				}
			}
		})
	}
	for _, id := range ids {
		jobs <- id
	}
	close(jobs)
	wg.Wait()
	return missing
}

func (c *cluster) missingFromDB(ctx context.Context, ids []string) []string {
	found := map[string]bool{}
	for start := 0; start < len(ids); start += 1000 {
		var got []string
		chunk := ids[start:min(len(ids), start+1000)]
		if err := c.gdb.WithContext(ctx).Table("orders").Where("id IN ?", chunk).Pluck("id", &got).Error; err != nil {
			c.t.Fatal(err)
		}
		for _, id := range got {
			found[id] = true
		}
	}
	var missing []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

// fencesMonotonic checks I3 in the database: the ledger per grant
// (fencesPerGrant), and each SKU's row holds the largest fence of its ledger
// (or a larger one, written by a confirm of a hold).
func (c *cluster) fencesMonotonic(ctx context.Context, r *result) bool {
	t := c.t
	r.FencesReused, r.FencesDown = c.fencesPerGrant(ctx)
	ok := r.FencesReused == 0 && r.FencesDown == 0
	last := map[string]int64{}
	rows, err := c.db.QueryContext(ctx, "SELECT sku, MAX(fence) FROM stock_ledger GROUP BY sku")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	for rows.Next() {
		var sku string
		var fence int64
		if err := rows.Scan(&sku, &fence); err != nil {
			t.Fatal(err)
		}
		last[sku] = fence
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var skus []struct {
		SKU   string
		Fence int64
	}
	if err := c.gdb.WithContext(ctx).Table("skus").Select("sku", "fence").Scan(&skus).Error; err != nil {
		t.Fatal(err)
	}
	// A whole confirm of a hold writes the row (reserved to sold) and no ledger
	// entry, since available does not change: the row of a SKU with a hold
	// confirmed may be ahead of its ledger, never behind.
	confirmed := map[string]bool{}
	var withConfirm []string
	if err := c.gdb.WithContext(ctx).Raw(`SELECT DISTINCT rl.sku FROM reservation_lines rl
		JOIN reservations r ON r.id = rl.reservation_id WHERE r.status = 'confirmed'`).Scan(&withConfirm).Error; err != nil {
		t.Fatal(err)
	}
	for _, sku := range withConfirm {
		confirmed[sku] = true
	}
	for _, s := range skus {
		if s.Fence < last[s.SKU] || (s.Fence > last[s.SKU] && !confirmed[s.SKU]) {
			t.Errorf("I3: %s: the row's fence %d, the ledger's largest %d", s.SKU, s.Fence, last[s.SKU])
			ok = false
		}
	}
	return ok
}

// cacheConverges waits (at most 10s) for every SKU's cache entry to equal the
// database's available stock or to be absent, and says how long it took.
func (c *cluster) cacheConverges(ctx context.Context, stocks []orders.Stock) string {
	keys := redislease.Keys{Namespace: c.ns}
	start := time.Now()
	var wrong []string
	for {
		wrong = wrong[:0]
		for _, s := range stocks {
			raw, err := c.rdb.Get(ctx, keys.Tag(s.SKU)+":stock").Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			avail, _, _ := strings.Cut(raw, ":") // <available>:<fence>
			v, perr := strconv.ParseInt(avail, 10, 64)
			if err != nil || perr != nil || v != s.Available {
				wrong = append(wrong, fmt.Sprintf("%s: cache %q (%v), database %d", s.SKU, raw, err, s.Available))
			}
		}
		if len(wrong) == 0 {
			return fmt.Sprintf("yes (%dms)", time.Since(start).Milliseconds())
		}
		if time.Since(start) > 10*time.Second {
			c.t.Errorf("I4: the cache did not converge in 10s after traffic stopped: %v", wrong)
			return "no"
		}
		hold(50 * time.Millisecond) // polling the cache, with a deadline
	}
}

func sample(m map[string]bool) []string {
	var out []string
	for k := range m {
		if len(out) == 5 {
			break
		}
		out = append(out, k)
	}
	return out
}

// fencesPerGrant checks I3 per grant in the database: per SKU, the ledger's
// entries in commit order grouped by the transaction that wrote them
// (PostgreSQL's xmin: every entry of one commit carries it), each group's fence
// strictly larger than the group's before. A grant commits at most one
// transaction per SKU, so two transactions with one fence mean one token served
// two grants (a fence counter that lost its latest values, and a store that
// accepts an equal token). It returns how many transactions reused a fence and
// how many went down.
func (c *cluster) fencesPerGrant(ctx context.Context) (reused, down int) {
	t := c.t
	rows, err := c.db.QueryContext(ctx, "SELECT sku, fence, xmin::text FROM stock_ledger ORDER BY sku, id")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	type group struct {
		xid   string
		fence int64
	}
	last := map[string]group{}
	owner := map[string]map[int64]string{} // sku -> fence -> the transaction that committed it
	var examples []string
	for rows.Next() {
		var sku, xid string
		var fence int64
		if err := rows.Scan(&sku, &fence, &xid); err != nil {
			t.Fatal(err)
		}
		prev, seen := last[sku]
		if seen && prev.xid == xid {
			if fence != prev.fence {
				t.Errorf("I3: %s: one transaction (%s) committed fences %d and %d", sku, xid, prev.fence, fence)
			}
			continue
		}
		if owner[sku] == nil {
			owner[sku] = map[int64]string{}
		}
		if other, ok := owner[sku][fence]; ok && other != xid {
			reused++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s: fence %d by transactions %s and %s", sku, fence, other, xid))
			}
		} else if seen && fence < prev.fence {
			down++
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s: fence %d committed after %d", sku, fence, prev.fence))
			}
		}
		owner[sku][fence] = xid
		last[sku] = group{xid: xid, fence: fence}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if reused+down > 0 {
		t.Errorf("I3: %d transactions committed a fence another grant had committed, %d a smaller one: %s", reused, down, strings.Join(examples, "; "))
	}
	return reused, down
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/api/apitest"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/internal/topology"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

var binary, loadtestBinary string // built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stockguard-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "stockguard")
	loadtestBinary = filepath.Join(dir, "loadtest")
	for out, pkg := range map[string]string{binary: ".", loadtestBinary: "../../loadtest"} {
		build := exec.CommandContext(context.Background(), "go", "build", "-o", out, pkg)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const adminToken = "test-admin-token"

// testDBConns bounds each test replica's database pool: go test runs two
// packages at once, and this package's clusters beside another package's
// replicas must stay under PostgreSQL's 100 connections.
const testDBConns = "STOCKGUARD_DB_MAX_CONNS=6"

// cluster is replicas of the built binary on one database and one Redis.
type cluster struct {
	dbURL string
	redis *testenv.Redis
	urls  []string
	logs  []string // each replica's log (its stderr)
	env   []string // the replicas' environment, for one more
}

func startCluster(t *testing.T, n int, extraEnv ...string) *cluster {
	t.Helper()
	c := &cluster{dbURL: testenv.DefaultDatabase(t), redis: testenv.NewRedis(t)}
	env := append(os.Environ(), "DATABASE_URL="+c.dbURL, "REDIS_URL="+c.redis.URL(),
		"STOCKGUARD_NAMESPACE="+c.redis.Namespace, "STOCKGUARD_ADMIN_TOKEN="+adminToken,
		"STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOCK_WAIT=20s", "STOCKGUARD_REQUEST_TIMEOUT=30s", testDBConns,
		"STOCKGUARD_SHUTDOWN_TIMEOUT=30s", "STOCKGUARD_LOG_LEVEL=warn")
	env = append(env, extraEnv...)
	c.env = env

	mig := exec.CommandContext(t.Context(), binary, "migrate")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	for i := range n {
		url, log := startReplicaLogged(t, i, env)
		c.urls, c.logs = append(c.urls, url), append(c.logs, log)
	}
	return c
}

// startReplicaLogged is startReplica that also returns the path of the
// replica's log (its stderr).
func startReplicaLogged(t *testing.T, i int, env []string) (string, string) {
	t.Helper()
	cmd := exec.CommandContext(context.WithoutCancel(t.Context()), binary, "serve") // stopped by the cleanup, gracefully
	cmd.Env = env
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("replica-%d.log", i))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("replica %d log:\n%s", i, b)
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("replica %d printed no address: %s", i, b)
	}
	addr, ok := topology.ListenAddr(lines.Text())
	if !ok {
		t.Fatalf("replica %d: unexpected first line %q", i, lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return "http://" + addr, logPath
}

// transport holds the tests' connections, shared by every client below. It
// drops a connection idle for 30s, before a replica's 60s IdleTimeout does:
// otherwise a POST written on a connection the replica was closing at that
// instant got EOF (a load slowed past a minute on a busy machine left some of
// its pooled connections idle that long), and a POST is not retried.
//
// Every request it sends carries the admin token unless it names an
// Authorization of its own (set, even empty, for a request without one):
// every route needs a credential, and most tests are about something else.
var transport = adminByDefault{&http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second}}

type adminByDefault struct{ base http.RoundTripper }

func (a adminByDefault) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, set := r.Header["Authorization"]; !set {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+adminToken)
	}
	return a.base.RoundTrip(r)
}

// client returns the client the tests talk to a replica with: every request it
// sends and every answer it gets is checked against api/openapi.yaml, a
// mismatch failing t. Only a replica's answers are the contract's: what nginx
// answers itself goes through nginxOwn.
func client(t testing.TB) *http.Client {
	// The admin token before the contract's check, which wants a credential.
	return &http.Client{Timeout: 60 * time.Second, Transport: adminByDefault{apitest.Transport(t, transport)}}
}

// offContract returns c marking every request it sends apitest.OffContract: the
// requests break the contract on purpose, and only the answers are checked.
func offContract(c *http.Client) *http.Client {
	off := *c
	off.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return c.Transport.RoundTrip(apitest.OffContract(r))
	})
	return &off
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// call sends a request to a replica (checked against the contract, failing t)
// and returns the answer's status and body.
func call(ctx context.Context, t testing.TB, method, url, body string, header map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client(t).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func admin(ctx context.Context, t *testing.T, method, url, body string, into any) {
	t.Helper()
	status, b, err := call(ctx, t, method, url, body, map[string]string{"Authorization": "Bearer " + adminToken})
	if err != nil || (status != http.StatusOK && status != http.StatusCreated) { // 201: a SKU created
		t.Fatalf("%s %s: %d %v %s", method, url, status, err, b)
	}
	if into != nil {
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
}

// loadResult is what clients were told.
type loadResult struct {
	mu       sync.Mutex
	orderIDs map[string][]orders.Item // from 201 answers
	statuses map[int]int
	retries  int
	mismatch []string // a retry answered differently from its first attempt
}

// runLoad sends n orders from workers goroutines, round-robin over the replicas:
// mixed quantities, some multi-SKU, and every 8th sent twice with the same
// Idempotency-Key, the retry to another replica.
func runLoad(ctx context.Context, t *testing.T, urls []string, n, workers int) *loadResult {
	t.Helper()
	res := &loadResult{orderIDs: map[string][]orders.Item{}, statuses: map[int]int{}}
	jobs := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range jobs {
				items := []orders.Item{{SKU: "HOT", Quantity: 1 + rng.IntN(3)}}
				switch rng.IntN(10) {
				case 0, 1:
					items = append(items, orders.Item{SKU: []string{"B", "C"}[rng.IntN(2)], Quantity: 1 + rng.IntN(2)})
				case 2:
					items = []orders.Item{{SKU: []string{"B", "C"}[rng.IntN(2)], Quantity: 1}}
				}
				body, _ := json.Marshal(map[string]any{"items": items})
				hdr := map[string]string{}
				if i%8 == 0 {
					hdr["Idempotency-Key"] = "load-" + strconv.Itoa(i)
				}
				status, b, err := call(ctx, t, "POST", urls[i%len(urls)]+"/v1/orders", string(body), hdr)
				if err != nil {
					errs <- err
					return
				}
				res.record(status, b)
				if hdr["Idempotency-Key"] != "" {
					status2, b2, err := call(ctx, t, "POST", urls[(i+1)%len(urls)]+"/v1/orders", string(body), hdr)
					if err != nil {
						errs <- err
						return
					}
					res.retried(status, b, status2, b2)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return res
}

func (r *loadResult) record(status int, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses[status]++
	if status == http.StatusCreated {
		var o orders.Order
		if json.Unmarshal(body, &o) == nil {
			r.orderIDs[o.ID] = o.Items
		}
	}
}

func (r *loadResult) retried(status int, body []byte, status2 int, body2 []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.retries++
	if status == http.StatusServiceUnavailable || status2 == http.StatusServiceUnavailable {
		return // a 503 is not an answer to replay: the retry may run anew
	}
	var a, b orders.Order
	_ = json.Unmarshal(body, &a)
	_ = json.Unmarshal(body2, &b)
	if status != status2 || a.ID != b.ID {
		r.mismatch = append(r.mismatch, fmt.Sprintf("%d %s then %d %s", status, a.ID, status2, b.ID))
	}
}

func (r *loadResult) sold() map[string]int64 {
	out := map[string]int64{}
	for _, items := range r.orderIDs {
		for _, it := range items {
			out[it.SKU] += int64(it.Quantity)
		}
	}
	return out
}

var stock = map[string]int64{"HOT": 70, "B": 20, "C": 10} // 100 units

func seed(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	for sku, n := range stock {
		admin(ctx, t, "POST", c.urls[0]+"/v1/skus/"+sku+"/restock", fmt.Sprintf(`{"quantity":%d}`, n), nil)
	}
}

// Three replicas on each lock service (--lock-url): the same load, the same
// checks.
func TestReplicasNeverOversell(t *testing.T) {
	for _, kind := range testenv.LockKinds() {
		t.Run(kind, func(t *testing.T) { replicasNeverOversell(t, kind, testenv.LockURL(t, kind)) })
	}
}

func replicasNeverOversell(t *testing.T, kind, lockURL string) {
	c := startCluster(t, 3, "STOCKGUARD_LOCK_URL="+lockURL)
	defer lockServiceUsed(t, kind, lockURL, c)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seed(ctx, t, c)
	start := time.Now()
	res := runLoad(ctx, t, c.urls, 2000, 64)
	t.Logf("load took %s", time.Since(start))
	t.Logf("answers by status: %v; %d orders accepted; %d idempotent retries", res.statuses, len(res.orderIDs), res.retries)

	// I1 through the API: consistent, nothing oversold, and what clients were told
	// was sold is what the service says was sold.
	var audit orders.Audit
	admin(ctx, t, "GET", c.urls[1]+"/v1/audit", "", &audit)
	if !audit.Consistent || audit.Oversold != 0 {
		t.Fatalf("audit: %+v", audit)
	}
	told := res.sold()
	for _, s := range audit.SKUs {
		if told[s.SKU] != s.Sold || s.Stocked != stock[s.SKU] {
			t.Errorf("%s: clients were sold %d, service says sold %d of %d stocked", s.SKU, told[s.SKU], s.Sold, s.Stocked)
		}
	}
	if told["HOT"] != stock["HOT"] {
		t.Errorf("HOT: %d of %d units sold; the load should sell it out", told["HOT"], stock["HOT"])
	}
	if len(res.mismatch) > 0 {
		t.Errorf("%d retries with the same Idempotency-Key got another answer, e.g. %s", len(res.mismatch), res.mismatch[0])
	}

	// The same, directly in the database: I1, and I2 (every 201 is stored, once).
	db, err := gormstore.Open(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	store := gormstore.New(db, time.Now, 30*time.Second)
	stocks, err := store.Stocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recounts, err := store.Recount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := orders.NewAudit(stocks, recounts); !a.Consistent || a.Oversold != 0 {
		t.Fatalf("database audit: %+v", a)
	}
	for id := range res.orderIDs {
		if o, err := store.Order(ctx, id); err != nil || o.Status != orders.StatusPlaced {
			t.Fatalf("acknowledged order %s: %+v %v", id, o, err)
		}
	}
	var placed int64
	if err := db.WithContext(ctx).Table("orders").Count(&placed).Error; err != nil {
		t.Fatal(err)
	}
	if placed != int64(len(res.orderIDs)) {
		t.Fatalf("%d orders stored, %d acknowledged: a retry created a second order, or an order was stored unacknowledged", placed, len(res.orderIDs))
	}

	// I4: the cache equals the database or is absent.
	rdb := c.redis.Client(t)
	keys := redislease.Keys{Namespace: c.redis.Namespace}
	for _, s := range stocks {
		raw, err := rdb.Get(ctx, keys.Tag(s.SKU)+":stock").Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		avail, _, _ := strings.Cut(raw, ":") // <available>:<fence>
		v, perr := strconv.ParseInt(avail, 10, 64)
		if err != nil || perr != nil || v != s.Available {
			t.Errorf("%s: cache %d (%v), database %d", s.SKU, v, err, s.Available)
		}
	}
}

// lockServiceUsed checks that the hot SKU's locks were taken from the lock
// service of kind: its fencing counter is there.
func lockServiceUsed(t *testing.T, kind, lockURL string, c *cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fence := redislease.Keys{Namespace: c.redis.Namespace}.Fence("HOT")
	switch kind {
	case "redis":
		if n, err := c.redis.Client(t).Exists(ctx, fence).Result(); err != nil || n != 1 {
			t.Errorf("no fence counter %s in the cache's Redis (%v): its locks were not taken there", fence, err)
		}
	case "redlock":
		opts, err := redlock.ParseURL(lockURL)
		if err != nil {
			t.Fatal(err)
		}
		with := 0
		for _, o := range opts {
			rdb := redis.NewClient(o)
			if n, err := rdb.Exists(ctx, fence).Result(); err == nil && n == 1 {
				with++
			}
			_ = rdb.Close()
		}
		if with < 2 {
			t.Errorf("the fence counter %s is on %d of 3 Redlock masters: its locks were not taken there", fence, with)
		}
		if n, err := c.redis.Client(t).Exists(ctx, fence).Result(); err != nil || n != 0 {
			t.Errorf("a fence counter %s in the cache's Redis (%v): some locks were taken there", fence, err)
		}
	case "postgres":
		db, err := gormstore.Open(lockURL)
		if err != nil {
			t.Fatal(err)
		}
		var token int64
		if err := db.WithContext(ctx).Raw("SELECT COALESCE(MAX(token), 0) FROM stockguard_locks WHERE resource = 'HOT'").Scan(&token).Error; err != nil || token == 0 {
			t.Errorf("no lock row of HOT in the lock database (token %d, %v): its locks were not taken there", token, err)
		}
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	case "etcd":
		etcdLockUsed(ctx, t, lockURL)
	case "azblob":
		if token, err := testenv.AzblobToken(ctx, lockURL, "HOT"); err != nil || token == 0 {
			t.Errorf("no lock blob of HOT in the azblob container (token %d, %v): its locks were not taken there", token, err)
		}
	}
}

// The control group: the same load without the lock must oversell, or the check
// above proves nothing.
func TestUnsafeStrategyOversells(t *testing.T) {
	c := startCluster(t, 3, "STOCKGUARD_STRATEGY=unsafe", "STOCKGUARD_ALLOW_OVERSELL=true")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seed(ctx, t, c)
	res := runLoad(ctx, t, c.urls, 2000, 64)
	var audit orders.Audit
	admin(ctx, t, "GET", c.urls[0]+"/v1/audit", "", &audit)
	t.Logf("unsafe: answers %v, audit oversold %d, consistent %v", res.statuses, audit.Oversold, audit.Consistent)
	if audit.Oversold == 0 {
		t.Fatalf("the unsafe strategy oversold nothing: %+v", audit)
	}
	told := res.sold()
	var total int64
	for _, n := range told {
		total += n
	}
	if total <= 100 {
		t.Fatalf("clients were sold %d units of 100: no oversell seen from outside", total)
	}
}

func TestUnsafeNeedsItsFlag(t *testing.T) {
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"serve", "--strategy", "unsafe"}, func(string) string { return "" }, io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--allow-oversell") {
		t.Fatalf("got %v, want a refusal naming --allow-oversell", err)
	}
}

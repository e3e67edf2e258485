//go:build faults

package faults

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/internal/topology"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// cluster is replicas of the built binary on a private PostgreSQL schema and a
// private redis-server (or a Sentinel group, or a Redis Cluster), behind the
// test's balancer.
type cluster struct {
	t     *testing.T
	id    string // in the replicas' application_name, the SKUs and the Redis namespace
	dbURL string
	gdb   *gorm.DB
	db    *sql.DB
	redis *testenv.RedisServer // the private server; nil on a replicated topology
	// redlock's masters, with clusterOptions.lock "redlock"; lockURL the
	// replicas' STOCKGUARD_LOCK_URL (application_name added per replica).
	redlock *testenv.Redlock
	// lockServer is the private server of clusterOptions.lock "etcd", "zk" or
	// "azblob" (then also azurite, for its account).
	lockServer *lockserver.Server
	azurite    *lockserver.AzuriteServer
	lockURL    string
	rdb        redis.UniversalClient  // straight to Redis (its master), never through a link
	group      *testenv.SentinelGroup // with clusterOptions.sentinel
	patroni    *testenv.Patroni       // with clusterOptions.patroni
	rc         *testenv.RedisCluster  // with clusterOptions.redisCluster
	url        string                 // the replicas' REDIS_URL
	opts       clusterOptions
	ns         string
	lb         *balancer
	hot        string // the load's hot SKU
	// auditEvents makes the load generator's audit read the events feed too
	// (its -audit-events): the events tests'.
	auditEvents bool
	probe       string // the SKU of the test's own probe orders, if any (replicated_test.go)

	tox   *toxiproxy.ApiServer
	links []*toxiproxy.Proxy // per replica index, when the replicas reach Redis through toxiproxy

	mu       sync.Mutex
	replicas []*replica // the running instance of each index
	retired  []*replica // instances stopped or killed: their last metrics still count
	overlap  *overlapSampler
}

type clusterOptions struct {
	replicas int
	// links puts every replica's Redis connections through its own toxiproxy proxy,
	// run in-process.
	links bool
	// sentinel runs the replicas on a Sentinel group (testenv.StartSentinelGroup:
	// master, replica, three sentinels) instead of one private redis-server;
	// redisCluster on a six-node Redis Cluster (testenv.StartRedisCluster). Not
	// with links.
	sentinel, redisCluster bool
	// sentinelReplicas is the Sentinel group's number of replicas (1 when 0).
	sentinelReplicas int
	// patroni puts the database on a replicated PostgreSQL (testenv.StartPatroni:
	// three nodes, strict synchronous replication), in a schema of its own, which
	// the replicas reach by its multi-host URL, instead of a schema of the shared
	// server. Started by the test, it may serve several clusters one after the
	// other; each waits until every member streams before it starts.
	patroni *testenv.Patroni
	// strategy is the replicas' STOCKGUARD_STRATEGY; "" leaves it to
	// STOCKGUARD_FAULTS_STRATEGY (and then the service's default).
	strategy string
	// env is added to every replica's environment.
	env []string
	// lock is the replicas' lock service (STOCKGUARD_LOCK_URL): "" the cache's
	// Redis; "redlock" three private redis-servers (testenv.StartRedlock);
	// "postgres" a PostgreSQL schema of its own, each replica's sessions named
	// by lockApp.
	// "zk" a private ZooKeeper (testenv.StartZooKeeper).
	lock string
}

func newCluster(t *testing.T, o clusterOptions) *cluster {
	t.Helper()
	ready(t)
	c := &cluster{t: t, id: testenv.RandomID()[:8], opts: o}
	c.ns = "f" + c.id
	if o.patroni != nil {
		c.patroni = o.patroni
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err := c.patroni.WaitHealthy(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		c.dbURL = c.patroni.NewSchema(t)
	} else {
		c.dbURL = testenv.NewDatabase(t, testenv.Postgres)
	}
	switch {
	case o.sentinel:
		c.group = testenv.StartSentinelGroupWith(t, max(o.sentinelReplicas, 1))
		c.url = c.group.URL()
		c.rdb = serviceClient(t, c.url)
	case o.redisCluster:
		c.rc = testenv.StartRedisCluster(t)
		c.url = c.rc.URL()
		c.rdb = serviceClient(t, c.url)
	default:
		c.redis = testenv.StartRedisServer(t)
		c.rdb = redis.NewClient(&redis.Options{Addr: c.redis.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = c.rdb.Close() })
		c.url = "redis://" + c.redis.Addr + "/0"
	}
	switch o.lock {
	case "":
	case "redlock":
		c.redlock = testenv.StartRedlock(t)
		c.lockURL = c.redlock.URL()
	case "postgres":
		c.lockURL = testenv.NewDatabase(t, testenv.Postgres)
	case "etcd":
		e := testenv.StartEtcd(t)
		c.lockServer, c.lockURL = e.Server, e.URL
	case "zk":
		z := testenv.StartZooKeeper(t)
		c.lockServer, c.lockURL = z.Server, z.URL()
	case "azblob":
		c.azurite = testenv.StartAzurite(t)
		c.lockServer = c.azurite.Server
		c.lockURL = testenv.AzblobURL(t)
	default:
		t.Fatalf("unknown lock service %q", o.lock)
	}
	gdb, err := gormstore.Open(c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	c.gdb = gdb
	if c.db, err = gdb.DB(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.db.Close() })

	mig := exec.CommandContext(t.Context(), binary, "migrate")
	mig.Env = append(os.Environ(), "DATABASE_URL="+c.dbURL)
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if o.links {
		c.startLinks(o.replicas)
	}
	c.lb = startBalancer(t, o.replicas)
	c.replicas = make([]*replica, o.replicas)
	// Before the balancer, Redis and the schema go; registered before the
	// replicas start, so that those started are stopped when a later one
	// fails to start (they were left running, holding their sessions).
	t.Cleanup(c.stopAll)
	for i := range o.replicas {
		c.start(i, 0)
	}
	c.overlap = startOverlapSampler(t, c.db, c.appPrefix())
	stopScrape := c.scrapeEvery(250 * time.Millisecond)
	t.Cleanup(stopScrape)
	return c
}

// serviceClient is the replicas' own kind of client of a replicated Redis, so
// that the checks follow a failover as the replicas do: a plain go-redis Cluster
// client keeps dialling a dead master's slots for up to a minute (see
// rediscache.NewClient). It is closed when the test ends.
func serviceClient(t *testing.T, redisURL string) redis.UniversalClient {
	t.Helper()
	rdb, err := rediscache.NewClient(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func (c *cluster) startLinks(n int) {
	c.tox = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for i := range n {
		p := toxiproxy.NewProxy(c.tox, fmt.Sprintf("redis-r%d", i), "127.0.0.1:0", c.redis.Addr)
		if err := c.tox.Collection.Add(p, true); err != nil {
			c.t.Fatalf("toxiproxy: %v", err)
		}
		c.links = append(c.links, p)
	}
	c.t.Cleanup(func() { _ = c.tox.Collection.Clear() })
}

func (c *cluster) appPrefix() string { return "sgf" + c.id + "-" }

// lockApp is the application_name of a replica's lock sessions (lock service
// postgres): apart from its store's, which the overlap sampler watches.
func lockApp(name string) string { return "lock-" + name }

// replica is one instance of a replica index: a process, restarted as a new
// instance (gen+1) after a kill.
type replica struct {
	idx, gen int
	name     string // its PostgreSQL application_name
	url      string
	cmd      *exec.Cmd
	logPath  string
	done     chan struct{} // closed when the process has exited
	paused   atomic.Bool
	killed   atomic.Bool

	mu   sync.Mutex
	last counters // its last scrape
}

func (r *replica) String() string { return r.name }

func (c *cluster) env(idx int, name string) []string {
	redisURL := c.url
	if c.links != nil {
		redisURL = "redis://" + c.links[idx].Listen + "/0"
	}
	env := append(os.Environ(),
		"DATABASE_URL="+withQuery(c.dbURL, "application_name", name),
		"REDIS_URL="+redisURL,
		"STOCKGUARD_NAMESPACE="+c.ns,
		"STOCKGUARD_ADMIN_TOKEN="+adminToken,
		"STOCKGUARD_ADDR=127.0.0.1:0",
		"STOCKGUARD_LOCK_TTL="+lease.String(),
		"STOCKGUARD_LOCK_WAIT="+lockWait.String(),
		"STOCKGUARD_REQUEST_TIMEOUT="+requestTimeout.String(),
		"STOCKGUARD_SHUTDOWN_TIMEOUT="+(requestTimeout+time.Second).String(),
		"STOCKGUARD_LOG_LEVEL=warn",
		"GORACE=halt_on_error=0",
		"STOCKGUARD_ALLOW_OVERSELL=", // a stray setting must not let a control group in
	)
	if s := c.strategy(); s != "" {
		env = append(env, "STOCKGUARD_STRATEGY="+s)
	}
	switch c.opts.lock {
	case "redlock", "etcd", "zk":
		env = append(env, "STOCKGUARD_LOCK_URL="+c.lockURL)
	case "postgres":
		env = append(env, "STOCKGUARD_LOCK_URL="+withQuery(c.lockURL, "application_name", lockApp(name)))
	case "azblob":
		env = append(env, "STOCKGUARD_LOCK_URL="+c.lockURL, "AZURE_STORAGE_CONNECTION_STRING="+c.azurite.ConnectionString)
	}
	return append(env, c.opts.env...)
}

// strategy is the replicas' strategy: the cluster's own, else the run's.
func (c *cluster) strategy() string {
	if c.opts.strategy != "" {
		return c.opts.strategy
	}
	return strategy()
}

func withQuery(raw, k, v string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// start runs instance gen of replica idx and puts it in the balancer.
func (c *cluster) start(idx, gen int) *replica {
	t := c.t
	t.Helper()
	r := &replica{idx: idx, gen: gen, name: fmt.Sprintf("%sr%d-%d", c.appPrefix(), idx, gen), done: make(chan struct{})}
	r.logPath = filepath.Join(t.TempDir(), r.name+".log")
	logFile, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.CommandContext(context.WithoutCancel(t.Context()), binary, "serve") // stopped by stopAll
	r.cmd.Env = c.env(idx, r.name)
	r.cmd.Stderr = logFile
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = r.cmd.Wait()
		_ = logFile.Close()
		close(r.done)
	}()
	first := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		if lines.Scan() {
			first <- lines.Text()
		} else {
			first <- ""
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-first:
		addr, ok := topology.ListenAddr(line)
		if !ok {
			b, _ := os.ReadFile(r.logPath)
			t.Fatalf("%s: first line %q\n%s", r, line, b)
		}
		r.url = "http://" + addr
	case <-time.After(60 * time.Second):
		_ = r.cmd.Process.Kill()
		t.Fatalf("%s did not start in 60s", r)
	}
	c.mu.Lock()
	c.replicas[idx] = r
	c.mu.Unlock()
	c.lb.set(idx, r.url)
	return r
}

func (c *cluster) all() []*replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*replica(nil), c.replicas...)
}

func (c *cluster) byName(name string) *replica {
	for _, r := range c.all() {
		if r.name == name {
			return r
		}
	}
	return nil
}

// pause stops a replica with SIGSTOP: its connections stay open, nothing runs.
func (c *cluster) pause(r *replica) {
	r.paused.Store(true)
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", r, err)
	}
}

func (c *cluster) resume(r *replica) {
	if err := r.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", r, err)
	}
	r.paused.Store(false)
}

// kill ends a replica with SIGKILL and takes it out of the balancer.
func (c *cluster) kill(r *replica) {
	r.killed.Store(true)
	if err := r.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("SIGKILL %s: %v", r, err)
	}
	c.lb.set(r.idx, "")
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("%s did not die within 10s of SIGKILL", r)
	}
	c.mu.Lock()
	c.retired = append(c.retired, r)
	c.mu.Unlock()
}

// restart starts the next instance of a killed replica.
func (c *cluster) restart(r *replica) *replica { return c.start(r.idx, r.gen+1) }

// stopAll stops every replica gracefully and fails the test on a data race or a
// panic in any replica's log, killed ones included.
func (c *cluster) stopAll() {
	var wg sync.WaitGroup
	for _, r := range c.all() {
		if r == nil { // never started
			continue
		}
		wg.Go(func() {
			if r.paused.Load() {
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
			}
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(20 * time.Second):
				_ = r.cmd.Process.Kill()
				<-r.done
			}
		})
	}
	wg.Wait()
	c.mu.Lock()
	every := append(append([]*replica(nil), c.replicas...), c.retired...)
	c.mu.Unlock()
	for _, r := range every {
		b, _ := os.ReadFile(r.logPath)
		log := string(b)
		switch {
		case strings.Contains(log, "WARNING: DATA RACE"):
			c.t.Errorf("%s: data race:\n%s", r, log)
		case strings.Contains(log, "panic:") || strings.Contains(log, "fatal error:"):
			c.t.Errorf("%s: panic:\n%s", r, log)
		case c.t.Failed():
			c.t.Logf("%s log (last 4 KiB):\n%s", r, tail(log, 4096))
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// waitFor polls cond every 10ms until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
}

// hold waits d: the length of a fault, not a stand-in for synchronisation.
func hold(d time.Duration) { <-time.After(d) }

// httpClient sends the admin token with every request that names no
// Authorization of its own: every route needs a credential, and the faults
// are about something else.
var httpClient = &http.Client{Timeout: 30 * time.Second, Transport: adminByDefault{&http.Transport{MaxIdleConnsPerHost: 64}}}

type adminByDefault struct{ base http.RoundTripper }

func (a adminByDefault) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, set := r.Header["Authorization"]; !set {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+adminToken)
	}
	return a.base.RoundTrip(r)
}

func get(ctx context.Context, rawURL string, hdr map[string]string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

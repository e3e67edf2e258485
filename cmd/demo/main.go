// Command demo tells stockguard's story on embedded defaults, in one command:
// a private Redis (a redis-server from the PATH, else an embedded miniredis whose
// keys expire in real time), SQLite, three "stockguard serve" replica processes
// behind a round-robin load balancer that health-checks them, and the load
// generator driving the same load through the balancer twice: first with the
// unsafe strategy (the control group: it oversells), then with the default
// strategy (lock-batch: the per-SKU lock, queued orders served together). It prints
// both side by side. A third round (carts.go), on replicas that sweep expired holds
// every 200 ms, is a flash sale with carts: shoppers hold units, most abandon them,
// and the units that expire are bought by shoppers refused at first. It exits 0
// only when neither the second round nor the third oversold anything and the third
// round's audit agrees with its shoppers. Every process it starts is stopped on the
// way out, Ctrl-C included.
//
// With -url it starts nothing: it drives replicas already running behind a
// balancer (the compose stack's nginx), -unsafe-url being the control group's,
// and tells the same story.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stockguard/stockguard/internal/embedredis"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	lock     string
	html     string // the page of the three rounds
	replicas int
	stock    int
	vus      int
	duration time.Duration
	admin    string // the replicas' admin token
	apiKey   string // the storefront's key; empty: the demo makes one on each cluster

	// The replicas already running (the compose stack): the balancers of the
	// default strategy's and of the unsafe strategy's, and the replicas behind
	// each, sampled for the page. Empty url: the demo starts its own.
	url, unsafeURL                 string
	replicaURLs, unsafeReplicaURLs urlList
	loadtest                       string // the load generator's binary, with -url
}

// urlList is a flag of comma-separated URLs.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }
func (l *urlList) Set(v string) error {
	*l = nil
	for u := range strings.SplitSeq(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			*l = append(*l, strings.TrimRight(u, "/"))
		}
	}
	return nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.lock, "lock", "redis", "lock service of the replicas: redis (the cache's Redis), redlock (three private redis-servers, from the PATH), postgres (the PostgreSQL of DATABASE_URL, which must be one), etcd (a private etcd, from the PATH), zk (a private ZooKeeper, from the java and ZooKeeper installed) or azblob (a private Azurite: see docs/locks.md)")
	fs.StringVar(&o.html, "html", filepath.Join(os.TempDir(), "stockguard-demo.html"), "write the page of the rounds (self-contained HTML) here: the unsafe and the default side by side, then the carts round")
	fs.IntVar(&o.replicas, "replicas", 3, "replica processes behind the balancer")
	fs.IntVar(&o.stock, "stock", 100, "units of the hot SKU on sale")
	fs.IntVar(&o.vus, "vus", 64, "load generator VUs")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each round")
	o.admin = cmp.Or(getenv("STOCKGUARD_ADMIN_TOKEN"), "demo-admin-token")
	fs.StringVar(&o.admin, "admin-token", o.admin, "the replicas' admin token (default $STOCKGUARD_ADMIN_TOKEN, else the one the demo gives the replicas it starts)")
	fs.StringVar(&o.apiKey, "api-key", getenv("STOCKGUARD_API_KEY"), "a client's API key for the shop's calls: the load generator's orders, the carts' holds, the stock read (default $STOCKGUARD_API_KEY; empty: the demo makes a storefront client and its key with the admin token on each cluster)")
	keyFile := fs.String("api-key-file", "", "read -api-key from this file (its first line): the compose stack's, written by its bootstrap service")
	fs.StringVar(&o.url, "url", "", "drive the replicas already running behind this balancer instead of starting any (the compose stack's nginx); they run the default strategy and sweep expired holds every -sweep-interval")
	fs.StringVar(&o.unsafeURL, "unsafe-url", "", "with -url: the balancer of the replicas that run the unsafe strategy (the control group)")
	fs.Var(&o.replicaURLs, "replica-urls", "with -url: the replicas behind it, comma-separated, whose /metrics the page draws")
	fs.Var(&o.unsafeReplicaURLs, "unsafe-replica-urls", "with -url: the replicas behind -unsafe-url, likewise")
	fs.StringVar(&o.loadtest, "loadtest", "", "with -url: the load generator's binary (default: loadtest beside the demo's own)")
	var co cartOptions
	fs.IntVar(&co.stock, "cart-stock", 20, "units on sale in the carts round")
	fs.IntVar(&co.shoppers, "shoppers", 300, "shoppers in the carts round")
	fs.DurationVar(&co.ttl, "hold-ttl", 3*time.Second, "time to live of a cart's hold in the carts round")
	fs.DurationVar(&co.sweep, "sweep-interval", 200*time.Millisecond, "the replicas' --sweep-interval in the carts round")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *keyFile != "" {
		key, err := readKeyFile(*keyFile)
		if err != nil {
			return fmt.Errorf("-api-key-file: %w", err)
		}
		o.apiKey = key
	}
	if co.stock < 1 || co.shoppers <= co.stock || co.ttl < orders.MinHoldTTL || co.sweep <= 0 {
		return fmt.Errorf("the carts round needs -cart-stock >= 1, more -shoppers than units, -hold-ttl >= %s and a positive -sweep-interval", orders.MinHoldTTL)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.url != "" {
		return runStack(ctx, o, co, stdout, log)
	}

	dir, err := os.MkdirTemp("", "stockguard-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	log.Info("building stockguard and the load generator")
	bins, err := topology.Build(ctx, dir)
	if err != nil {
		return err
	}
	redisURL, stopRedis, err := startRedis(ctx, getenv("REDIS_URL"), log)
	if err != nil {
		return err
	}
	defer stopRedis()
	svc := services{redisURL: redisURL, databaseURL: getenv("DATABASE_URL")}
	lockURL, stopLocks, err := startLockService(ctx, o.lock, svc.databaseURL, log)
	if err != nil {
		return err
	}
	defer stopLocks()
	svc.lockURL = lockURL
	o.loadtest = bins.Loadtest
	start := func(ctx context.Context, round string) (cluster, error) {
		env := []string{"STOCKGUARD_STRATEGY=" + round, "STOCKGUARD_ALLOW_OVERSELL=true"}
		if round == cartsRound {
			env = []string{"STOCKGUARD_SWEEP_INTERVAL=" + co.sweep.String()} // expired carts come back within it
		}
		return startCluster(ctx, bins, dir, svc, round, o, log, env...)
	}
	return tell(ctx, start, o, co, stdout, log)
}

// runStack tells the story on replicas that are already running: the compose
// stack's, behind nginx.
func runStack(ctx context.Context, o options, co cartOptions, stdout io.Writer, log *slog.Logger) error {
	if o.unsafeURL == "" {
		return errors.New("-url needs -unsafe-url: the control group's replicas run the unsafe strategy")
	}
	if o.loadtest == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		o.loadtest = filepath.Join(filepath.Dir(self), "loadtest")
	}
	o.lock = "the stack's lock service"
	if len(o.replicaURLs) > 0 { // what the tables and the page say: the replicas named, not -replicas
		o.replicas = len(o.replicaURLs)
	}
	running := map[string]cluster{
		string(orders.StrategyUnsafe):  {url: strings.TrimRight(o.unsafeURL, "/"), replicas: o.unsafeReplicaURLs},
		string(orders.DefaultStrategy): {url: strings.TrimRight(o.url, "/"), replicas: o.replicaURLs},
	}
	running[cartsRound] = running[string(orders.DefaultStrategy)]
	start := func(ctx context.Context, round string) (cluster, error) {
		c := running[round]
		c.stop = func() {}
		return c, waitReady(ctx, c.url, log)
	}
	return tell(ctx, start, o, co, stdout, log)
}

// waitReady waits, for at most a minute, until the balancer at url answers
// /readyz with 200: the compose stack's health checks gate the start, this
// covers a balancer that is up before its replicas.
func waitReady(ctx context.Context, url string, log *slog.Logger) error {
	client := &http.Client{Timeout: 2 * time.Second}
	var last string
	for i := range 120 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if i%10 == 0 {
			log.Info("waiting for the replicas to be ready", "balancer", url, "last", last)
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s/readyz: not ready within a minute: %s", url, last)
}

// cluster is where a round's load goes: a balancer, the replicas behind it
// (sampled for the page) and what stops them.
type cluster struct {
	url      string
	replicas []string
	stop     func()
}

// cartsRound names the carts round's cluster.
const cartsRound = "carts"

// tell runs the rounds on the clusters start gives (each is stopped after its
// round), prints their tables, writes the page and says whether anything was
// oversold where it must not be.
func tell(ctx context.Context, start func(context.Context, string) (cluster, error), o options, co cartOptions,
	stdout io.Writer, log *slog.Logger) error {
	var rows []roundResult
	var drawn []roundSeries
	for _, strategy := range []string{string(orders.StrategyUnsafe), string(orders.DefaultStrategy)} {
		r, err := runRound(ctx, start, strategy, o, log)
		if ctx.Err() != nil {
			return errors.New("interrupted: every process the demo started is stopped")
		}
		if err != nil {
			return fmt.Errorf("%s round: %w", strategy, err)
		}
		rows, drawn = append(rows, r.Result), append(drawn, r)
	}
	printTable(stdout, rows, o)
	for _, r := range drawn {
		printEvents(stdout, *r.Events)
	}
	// The page of these two rounds now, so that it is there should the carts
	// round fail; written again with the carts round when it ends.
	if err := writePage(o.html, drawn, nil, o, co); err != nil {
		return fmt.Errorf("the page: %w", err)
	}
	log.Info("wrote the page of the unsafe and the default rounds", "path", o.html)
	if rows[1].Oversold != 0 {
		return fmt.Errorf("the %s round oversold %.0f units", rows[1].Strategy, rows[1].Oversold)
	}
	if ev := drawn[1].Events; !ev.OK() {
		return fmt.Errorf("the %s round's events do not tell its counters: %s", rows[1].Strategy, strings.Join(ev.Problems, "; "))
	}
	fmt.Fprintf(stdout, "\nthe %s round oversold nothing: %d replicas, one SKU, %d units, %d VUs, locks on %s\n", rows[1].Strategy, o.replicas, o.stock, o.vus, o.lock)

	cl, err := start(ctx, cartsRound)
	if err != nil {
		return fmt.Errorf("carts round: %w", err)
	}
	carts, err := runCarts(ctx, cl, o, co, log)
	cl.stop()
	if ctx.Err() != nil {
		return errors.New("interrupted: every process the demo started is stopped")
	}
	if err != nil {
		return fmt.Errorf("carts round: %w", err)
	}
	printCarts(stdout, carts, co)
	printEvents(stdout, *carts.Events)
	if err := writePage(o.html, drawn, &carts, o, co); err != nil {
		return fmt.Errorf("the page: %w", err)
	}
	log.Info("wrote the page of the three rounds", "path", o.html)
	if !carts.Consistent {
		return fmt.Errorf("the carts round failed its checks: %s", strings.Join(carts.Problems, "; "))
	}
	if !carts.Events.OK() {
		return fmt.Errorf("the carts round's events do not tell its counters: %s", strings.Join(carts.Events.Problems, "; "))
	}
	fmt.Fprintf(stdout, "\nthe carts round oversold nothing: %d units came back from abandoned carts, %d were sold again; the audit agrees with the shoppers\n",
		carts.Expired, carts.Resold)
	fmt.Fprintf(stdout, "\n%s\n", callers(o))
	link := pageLink(o.html)
	if o.url != "" { // in a container: say how to get it out
		link = o.html + " (from the compose stack: docker compose cp demo:" + o.html + " .)"
	}
	fmt.Fprintf(stdout, "\nthe unsafe and the %s rounds side by side, then the carts round: %s\n", rows[1].Strategy, link)
	return nil
}

type roundResult struct {
	Strategy string
	Accepted float64 `json:"orders_accepted"`
	Reqs     float64 `json:"http_reqs"`
	Duration float64 `json:"duration_s"`
	Oversold float64 `json:"oversold"`
	Latency  struct {
		P95 float64 `json:"p(95)"`
		P99 float64 `json:"p(99)"`
	} `json:"http_req_duration_ms"`
	Audit struct {
		Stocked    float64 `json:"units_stocked"`
		ClientSold float64 `json:"units_sold_client"`
		ServerSold float64 `json:"units_sold_server"`
	} `json:"audit"`
}

// runRound has start give the round's replicas and balancer, drives them while
// sampling them for the page, and stops them.
func runRound(ctx context.Context, start func(context.Context, string) (cluster, error), strategy string, o options,
	log *slog.Logger) (roundSeries, error) {
	cl, err := start(ctx, strategy)
	if err != nil {
		return roundSeries{}, err
	}
	defer cl.stop()
	lbURL := cl.url
	log.Info("round starts", "strategy", strategy, "replicas", o.replicas, "balancer", lbURL)

	prefix := "demo-" + strategy + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) // its SKU: <prefix>-0
	transport := &http.Transport{}                                                    // no proxy: the replicas are on loopback
	defer transport.CloseIdleConnections()
	sh, err := newShop(&http.Client{Transport: transport, Timeout: 5 * time.Second}, lbURL, o.admin)
	if err != nil {
		return roundSeries{}, err
	}
	if err := storefrontKey(ctx, sh, o, log); err != nil {
		return roundSeries{}, err
	}
	cursor, err := feed{shop: sh}.end(ctx) // the round's events come after it
	if err != nil {
		return roundSeries{}, fmt.Errorf("the feed's end before the round: %w", err)
	}
	smp := &sampler{shop: sh, balancer: lbURL,
		replicas: cl.replicas, route: ordersRoute, sku: prefix + "-0", start: time.Now()}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); smp.run(sctx) }()
	defer func() { stopSampling(); <-sampled }()

	summaryFile, err := os.CreateTemp("", "stockguard-demo-"+strategy+"-*.json")
	if err != nil {
		return roundSeries{}, err
	}
	summary := summaryFile.Name()
	_ = summaryFile.Close()
	defer func() { _ = os.Remove(summary) }()
	// The workload (orders, reads) with the storefront's key, the seeding and
	// the audit with the admin token: both in the environment, not on the
	// command line, where every user of the machine could read them.
	load := exec.CommandContext(ctx, o.loadtest, "-url", lbURL,
		"-vus", strconv.Itoa(o.vus), "-duration", o.duration.String(), "-skus", "1", "-stock", strconv.Itoa(o.stock),
		"-prefix", prefix, "-max-quantity", "3", "-multi", "0", "-retry", "0.1", "-abandon", "0.3", "-cancel", "0",
		"-threshold", "oversold:count==0", "-summary-json", summary, "-quiet")
	load.Env = append(os.Environ(), "STOCKGUARD_ADMIN_TOKEN="+o.admin, "STOCKGUARD_API_KEY="+sh.key)
	load.Stderr = os.Stderr
	err = load.Run()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() != 99) { // 99: thresholds failed, expected of unsafe
		return roundSeries{}, fmt.Errorf("load generator: %w", err)
	}
	stopSampling()
	<-sampled
	b, err := os.ReadFile(summary)
	if err != nil {
		return roundSeries{}, err
	}
	r := roundResult{Strategy: strategy}
	if err := json.Unmarshal(b, &r); err != nil {
		return roundSeries{}, err
	}
	ev, err := eventsOf(ctx, sh, strategy, cursor, []string{prefix + "-0"})
	if err != nil {
		return roundSeries{}, err
	}
	out := smp.series(strategy, r)
	out.Events = &ev
	return out, nil
}

// startCluster migrates a round's database (its own SQLite file unless
// DATABASE_URL is set), starts the replicas with the round's settings (env, on
// top of the demo's) behind the balancer, and returns the balancer's URL, the
// replicas' URLs and a stop that ends them and removes the round's Redis keys.
// services are the servers every round's replicas share.
type services struct {
	redisURL    string
	databaseURL string // empty: a SQLite file per round
	lockURL     string // empty: the cache's Redis
}

func startCluster(ctx context.Context, bins topology.Binaries, dir string, svc services, name string, o options,
	log *slog.Logger, env ...string) (cluster, error) {
	redisURL, databaseURL := svc.redisURL, svc.databaseURL
	if databaseURL == "" {
		databaseURL = "sqlite:" + filepath.Join(dir, name+".db")
	}
	ns := "demo-" + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var procs []*exec.Cmd
	var lb *topology.Balancer
	stop := func() {
		if lb != nil {
			lb.Stop(ctx)
		}
		topology.StopAll(procs)
		topology.DropNamespace(ctx, redisURL, ns, log) // a shared Redis keeps none of the demo's keys
	}
	env = append(append(os.Environ(), "DATABASE_URL="+databaseURL, "REDIS_URL="+redisURL,
		"STOCKGUARD_LOCK_URL="+svc.lockURL, "STOCKGUARD_NAMESPACE="+ns, "STOCKGUARD_ADMIN_TOKEN="+o.admin,
		"STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOG_LEVEL=error", "STOCKGUARD_LOCK_WAIT=4s",
		"STOCKGUARD_REQUEST_TIMEOUT=5s", "STOCKGUARD_SHUTDOWN_TIMEOUT=8s"), env...) // a quick stop on Ctrl-C
	mig := exec.CommandContext(ctx, bins.Stockguard, "migrate")
	mig.Env = env
	if out, err := mig.CombinedOutput(); err != nil {
		stop()
		return cluster{}, fmt.Errorf("migrate: %w\n%s", err, out)
	}
	var backends []string
	for i := range o.replicas {
		cmd, url, err := topology.StartReplica(ctx, bins.Stockguard, env)
		if err != nil {
			stop()
			return cluster{}, fmt.Errorf("replica %d: %w", i, err)
		}
		procs = append(procs, cmd)
		backends = append(backends, url)
	}
	var err error
	if lb, err = topology.StartBalancer(ctx, backends, log); err != nil {
		stop()
		return cluster{}, err
	}
	return cluster{url: lb.URL, replicas: backends, stop: stop}, nil
}

func printTable(w io.Writer, rows []roundResult, o options) {
	fmt.Fprintf(w, "\n%-8s %9s %8s %6s %9s %9s %9s %9s\n", "strategy", "accepted", "stocked", "sold", "oversold", "req/s", "p95", "p99")
	for _, r := range rows {
		fmt.Fprintf(w, "%-10s %9.0f %8.0f %6.0f %9.0f %9.0f %7.1fms %7.1fms\n", r.Strategy, r.Accepted, r.Audit.Stocked,
			r.Audit.ServerSold, r.Oversold, r.Reqs/max(r.Duration, 0.001), r.Latency.P95, r.Latency.P99)
	}
}

// startRedis returns REDIS_URL when set, else starts a private redis-server on a
// free port when one is on the PATH, else an embedded miniredis, and returns its URL.
func startRedis(ctx context.Context, url string, log *slog.Logger) (string, func(), error) {
	if url != "" {
		return url, func() {}, nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := lockserver.StartRedis(sctx, "", lockserver.RedisOptions{})
	if err == nil {
		log.Info("started a private redis-server", "addr", s.Addr)
		return "redis://" + s.Addr + "/0", func() { _ = s.Close() }, nil
	}
	if !errors.Is(err, lockserver.ErrNotInstalled) {
		return "", nil, err
	}
	addr, stop, err := embedredis.Start()
	if err != nil {
		return "", nil, err
	}
	log.Info("no redis-server on the PATH: using an embedded Redis (miniredis)", "addr", addr)
	return "redis://" + addr + "/0", stop, nil
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/webhook"
)

type serveConfig struct {
	addr                 string
	databaseURL          string
	redisURL             string
	lockURL              string
	accessLog            bool
	adminToken           string
	authRefresh          time.Duration
	defaultMaxUnitsHeld  int
	defaultRate          float64
	defaultBurst         int
	trustedProxyList     string
	insecureNoAuth       bool
	failedAuthRate       float64
	failedAuthBurst      int
	strategy             string
	allowOversell        bool
	lockTTL              time.Duration
	lockWait             time.Duration
	lockReplicas         int
	requestTimeout       time.Duration
	shutdownTimeout      time.Duration
	readHeaderTimeout    time.Duration
	readTimeout          time.Duration
	maxBatch             int
	maxQueue             int
	unsafeWindow         time.Duration
	idempotencyRetention time.Duration
	maxHoldTTL           time.Duration
	sweepInterval        time.Duration
	relayInterval        time.Duration
	eventRetention       time.Duration
	natsURL              string
	events               bool
	webhookRetryFor      time.Duration
	webhookTimeout       time.Duration
	webhookAllowNetworks string
	webhookDisableAfter  time.Duration
	dbMaxConns           int
	pprofAddr            string
	metricsAddr          string
	tlsCertFile          string
	tlsKeyFile           string
	tlsClientCAFile      string
	namespace            string
	logLevel             string
	logFormat            string
	azureConnString      string // AZURE_STORAGE_CONNECTION_STRING, for an azblob:// lock-url; never printed

	// Allocation is --allocation, parsed (orders.ParseAllocation): how
	// the service allocates an order's or a hold's line that names no
	// location.
	Allocation orders.AllocationStrategy
}

type migrateConfig struct {
	databaseURL string
	logLevel    string
	logFormat   string
}

// envFlags defines flags whose defaults come from environment variables, and
// names the variable in each flag's help.
type envFlags struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	errs    []error
	secrets []func(set map[string]bool)
	envs    map[string]string // each flag's environment variable, for docs/configuration.md's table
}

// env records a flag's variable and returns the suffix of its help.
func (e *envFlags) env(name, env string) string {
	e.envs[name] = env
	return " ($" + env + ")"
}

func (e *envFlags) str(p *string, name, env, def, help string) {
	if v := e.getenv(env); v != "" {
		def = v
	}
	e.fs.StringVar(p, name, def, help+e.env(name, env))
}

// secret is str for values that must not show in --help: the environment's
// value applies when the flag is not given, but is not printed as its default.
func (e *envFlags) secret(p *string, name, env, def, help string) {
	e.fs.StringVar(p, name, def, help+e.env(name, env))
	e.secrets = append(e.secrets, func(set map[string]bool) {
		if v := e.getenv(env); v != "" && !set[name] {
			*p = v
		}
	})
}

func (e *envFlags) duration(p *time.Duration, name, env string, def time.Duration, help string) {
	if v := e.getenv(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = d
	}
	e.fs.DurationVar(p, name, def, help+e.env(name, env))
}

func (e *envFlags) float(p *float64, name, env string, def float64, help string) {
	if v := e.getenv(env); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = f
	}
	e.fs.Float64Var(p, name, def, help+e.env(name, env))
}

func (e *envFlags) integer(p *int, name, env string, def int, help string) {
	if v := e.getenv(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = n
	}
	e.fs.IntVar(p, name, def, help+e.env(name, env))
}

func (e *envFlags) boolean(p *bool, name, env string, help string, deflt ...bool) {
	def := len(deflt) > 0 && deflt[0]
	if v := e.getenv(env); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = b
	}
	e.fs.BoolVar(p, name, def, help+e.env(name, env))
}

// allocation is an orders.AllocationStrategy flag: a value
// orders.ParseAllocation refuses is refused with the flags, or, from the
// environment, named with its variable.
func (e *envFlags) allocation(p *orders.AllocationStrategy, name, env string, def orders.AllocationStrategy, help string) {
	*p = def
	if v := e.getenv(env); v != "" {
		if err := (allocationValue{p}).Set(v); err != nil {
			e.errs = append(e.errs, fmt.Errorf("$%s: %w", env, err))
		}
	}
	e.fs.Var(allocationValue{p}, name, help+e.env(name, env))
}

// allocationValue is the flag.Value of an allocation strategy.
type allocationValue struct{ p *orders.AllocationStrategy }

func (v allocationValue) String() string {
	if v.p == nil { // the zero Value flag makes to tell a default apart
		return ""
	}
	return string(*v.p)
}

func (v allocationValue) Set(s string) error {
	a, err := orders.ParseAllocation(s)
	if err != nil {
		return err
	}
	*v.p = a
	return nil
}

func newFlags(name string, getenv func(string) string, stderr io.Writer) *envFlags {
	fs := flag.NewFlagSet("stockguard "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &envFlags{fs: fs, getenv: getenv, envs: map[string]string{}}
}

func (e *envFlags) parse(args []string) error {
	if err := e.fs.Parse(args); err != nil {
		return err
	}
	if e.fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(e.fs.Args(), " "))
	}
	set := map[string]bool{}
	e.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, apply := range e.secrets {
		apply(set)
	}
	return errors.Join(e.errs...)
}

func logFlags(e *envFlags, level, format *string) {
	e.str(level, "log-level", "STOCKGUARD_LOG_LEVEL", "info", "log level: debug, info, warn or error")
	e.str(format, "log-format", "STOCKGUARD_LOG_FORMAT", "text", "log format: text or json")
}

func parseServe(args []string, getenv func(string) string, stderr io.Writer) (serveConfig, error) {
	var c serveConfig
	e := serveFlags(&c, getenv, stderr)
	c.azureConnString = getenv(azureConnStringEnv)
	if err := e.parse(args); err != nil {
		return c, err
	}
	return c, c.check()
}

// serveFlags declares serve's flags into c: the settings of a replica, as
// --help and docs/configuration.md's table show them.
func serveFlags(c *serveConfig, getenv func(string) string, stderr io.Writer) *envFlags {
	e := newFlags("serve", getenv, stderr)
	e.str(&c.addr, "addr", "STOCKGUARD_ADDR", ":8080", "address to listen on")
	e.secret(&c.databaseURL, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "database: postgres://..., mysql://... or sqlite:<path>")
	e.secret(&c.redisURL, "redis-url", "REDIS_URL", "", "Redis: redis://host:6379/0; ?master_name=m&addr=... for Sentinel; ?addr=... for a Cluster seed list; empty for an embedded Redis (one replica only)")
	e.secret(&c.lockURL, "lock-url", "STOCKGUARD_LOCK_URL", "", "lock service of the SKU locks and the sweeper's lease: redis://... (the forms of --redis-url), redlock://host1:6379,host2:6380,host3:6381[/db], postgres://... (the forms of --database-url), etcd://host:2379[,host2:2379][/prefix], zk://host:2181[,host2:2181][/chroot], or azblob://<container>[/prefix] (the account from AZURE_STORAGE_CONNECTION_STRING); empty uses --redis-url. The cache stays on --redis-url")
	e.secret(&c.adminToken, "admin-token", "STOCKGUARD_ADMIN_TOKEN", "", "bootstrap credential with the admin scope (Authorization: Bearer <token>): it may call every route, make clients and their keys; empty accepts the clients' keys only")
	e.duration(&c.authRefresh, "auth-refresh", "STOCKGUARD_AUTH_REFRESH", auth.DefaultRefresh, "how often a replica reads the API keys it has seen again: a revoked key or a client's new scopes and limits apply within it")
	e.integer(&c.defaultMaxUnitsHeld, "default-max-units-held-per-sku", "STOCKGUARD_DEFAULT_MAX_UNITS_HELD_PER_SKU", auth.DefaultMaxUnitsHeldPerSKU, "a new client's cap on units held in live holds per SKU, when its request leaves max_units_held_per_sku out")
	e.float(&c.defaultRate, "default-rate-limit", "STOCKGUARD_DEFAULT_RATE_LIMIT", auth.DefaultRatePerSecond, "a new client's requests per second, all replicas together, when its request leaves rate_limit out")
	e.integer(&c.defaultBurst, "default-rate-burst", "STOCKGUARD_DEFAULT_RATE_BURST", auth.DefaultRateBurst, "a new client's burst of requests, when its request leaves rate_limit out")
	e.boolean(&c.insecureNoAuth, "insecure-no-auth", "STOCKGUARD_INSECURE_NO_AUTH", "take every request as the admin's, with no credential, scope or rate limit checked: the control group of the benchmark that measures what the checks cost (make bench), never a deployment")
	e.float(&c.failedAuthRate, "failed-auth-rate", "STOCKGUARD_FAILED_AUTH_RATE", 10, "failed authentications per second one source address may make, all replicas together, before it is answered 429")
	e.integer(&c.failedAuthBurst, "failed-auth-burst", "STOCKGUARD_FAILED_AUTH_BURST", 20, "failed authentications one source address may make at once")
	e.str(&c.trustedProxyList, "trusted-proxies", "STOCKGUARD_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of the proxies whose X-Forwarded-For names a request's source (nginx in compose); empty trusts none")
	e.str(&c.strategy, "strategy", "STOCKGUARD_STRATEGY", string(orders.DefaultStrategy), "how orders are serialized: "+strategyList()+" (unsafe oversells; it needs --allow-oversell)")
	e.boolean(&c.allowOversell, "allow-oversell", "STOCKGUARD_ALLOW_OVERSELL", "let the unsafe strategy run")
	e.allocation(&c.Allocation, "allocation", "STOCKGUARD_ALLOCATION", orders.AllocatePriority, "the `strategy` that allocates an order's or a hold's line naming no location: priority (the active locations by priority, the lowest first, then by id) or most-available (the one with the most available first); split over several when one has too few, unless the line says \"split\": false")
	e.duration(&c.lockTTL, "lock-ttl", "STOCKGUARD_LOCK_TTL", 5*time.Second, "lease of a per-SKU lock; a crashed holder blocks its SKU this long at most")
	e.duration(&c.lockWait, "lock-wait", "STOCKGUARD_LOCK_WAIT", 2*time.Second, "how long a request waits for a SKU lock before a 503 with Retry-After")
	e.integer(&c.lockReplicas, "lock-replicas", "STOCKGUARD_LOCK_REPLICAS", 0, "after taking a lock, wait until this many Redis replicas have it (WAIT), so a failover keeps it; 0 does not wait, and no lock is had while fewer replicas are up")
	e.duration(&c.requestTimeout, "request-timeout", "STOCKGUARD_REQUEST_TIMEOUT", 10*time.Second, "deadline of every request")
	e.integer(&c.dbMaxConns, "db-max-conns", "STOCKGUARD_DB_MAX_CONNS", gormstore.DefaultMaxConns, "most database connections of this replica (PostgreSQL, MySQL)")
	e.integer(&c.maxBatch, "max-batch", "STOCKGUARD_MAX_BATCH", service.DefaultMaxBatch, "most orders lock-batch serves in one critical section and transaction")
	e.integer(&c.maxQueue, "max-queue", "STOCKGUARD_MAX_QUEUE", service.DefaultMaxQueue, "most lock-batch orders that may wait on this replica; more are refused at once (503 overloaded, Retry-After)")
	e.duration(&c.idempotencyRetention, "idempotency-retention", "STOCKGUARD_IDEMPOTENCY_RETENTION", service.DefaultRetention, "how long an Idempotency-Key's answer is kept; a request repeating the key after it is a new order")
	e.duration(&c.maxHoldTTL, "max-hold-ttl", "STOCKGUARD_MAX_HOLD_TTL", orders.DefaultMaxTTL, "longest time to live a hold may be made or extended for (at least 1s)")
	e.duration(&c.sweepInterval, "sweep-interval", "STOCKGUARD_SWEEP_INTERVAL", service.DefaultSweep, "how often the sweeper's leader returns expired holds' units to available")
	e.duration(&c.relayInterval, "relay-interval", "STOCKGUARD_RELAY_INTERVAL", events.DefaultRelay, "how often the events relay's leader looks for new stock events when it found none; the feed and the stream are this late at most, when idle")
	e.duration(&c.eventRetention, "event-retention", "STOCKGUARD_EVENT_RETENTION", events.DefaultEventRetention, "how long a delivered stock event stays in the feed (GET /v1/events) before it is purged; a webhook endpoint that is behind holds events back for up to twice this")
	e.boolean(&c.events, "events", "STOCKGUARD_EVENTS", "write a stock event for every change of a SKU's counters, in its transaction, and relay them (GET /v1/events, --nats-url, webhooks); off writes none and runs no relay (the feed answers 404)", true)
	e.secret(&c.natsURL, "nats-url", "NATS_URL", "", "NATS with JetStream, where the relay publishes every stock event (stockguard.sku.<sku>): nats://host:4222; empty publishes none (the feed still has them)")
	e.duration(&c.webhookRetryFor, "webhook-retry-for", "STOCKGUARD_WEBHOOK_RETRY_FOR", webhook.DefaultFor, "how long a webhook delivery is retried, with exponential backoff and jitter, before the event is recorded failed and skipped")
	e.duration(&c.webhookTimeout, "webhook-timeout", "STOCKGUARD_WEBHOOK_TIMEOUT", defaultWebhookTimeout, "deadline of one webhook delivery attempt: the request sent and the answer's status read")
	e.str(&c.webhookAllowNetworks, "webhook-allow-networks", "STOCKGUARD_WEBHOOK_ALLOW_NETWORKS", "", "comma-separated CIDRs a webhook may reach although they are loopback, private or otherwise inside (a compose network, a test receiver on 127.0.0.0/8); empty allows none: such URLs are refused at registration (422) and every connection to such an address is refused when dialled")
	e.duration(&c.webhookDisableAfter, "webhook-disable-after", "STOCKGUARD_WEBHOOK_DISABLE_AFTER", events.DefaultWebhookDisableAfter, "a webhook endpoint whose attempts have all failed, with no success, for this long is disabled until PATCH /v1/webhooks/{id} enables it (one that answers 410 Gone is disabled at once)")
	e.duration(&c.unsafeWindow, "unsafe-window", "STOCKGUARD_UNSAFE_WINDOW", service.DefaultUnsafeWindow, "unsafe only: the wait between reading the stock and writing it back, widened on purpose so that the control group oversells every time")
	e.duration(&c.readHeaderTimeout, "read-header-timeout", "STOCKGUARD_READ_HEADER_TIMEOUT", 5*time.Second, "how long a client may take to send a request's headers before its connection is closed")
	e.duration(&c.readTimeout, "read-timeout", "STOCKGUARD_READ_TIMEOUT", 15*time.Second, "how long a client may take to send a whole request, headers and body")
	e.duration(&c.shutdownTimeout, "shutdown-timeout", "STOCKGUARD_SHUTDOWN_TIMEOUT", 15*time.Second, "how long a shutdown waits for requests in flight")
	e.boolean(&c.accessLog, "access-log", "STOCKGUARD_ACCESS_LOG", "a log line per request at info (method, route, status, latency, request id, idempotency key); off, only failures are logged", true)
	e.str(&c.tlsCertFile, "tls-cert-file", "STOCKGUARD_TLS_CERT_FILE", "", "PEM certificate (chain) to serve HTTPS with on --addr, TLS 1.2 or later; reloaded when the file changes, no restart; needs --tls-key-file")
	e.str(&c.tlsKeyFile, "tls-key-file", "STOCKGUARD_TLS_KEY_FILE", "", "PEM private key of --tls-cert-file")
	e.str(&c.tlsClientCAFile, "tls-client-ca-file", "STOCKGUARD_TLS_CLIENT_CA_FILE", "", "PEM CA bundle: every client must present a certificate it signed (mutual TLS); needs --tls-cert-file")
	e.str(&c.metricsAddr, "metrics-addr", "STOCKGUARD_METRICS_ADDR", "", "serve /metrics on this address alone (plain HTTP, for Prometheus inside the network) and not on --addr; empty serves it on --addr")
	e.str(&c.pprofAddr, "pprof-addr", "STOCKGUARD_PPROF_ADDR", "", "serve Go's profiles (/debug/pprof/) on this address; empty turns them off")
	e.str(&c.namespace, "namespace", "STOCKGUARD_NAMESPACE", "sku", "first part of every Redis key's hash tag ({<namespace>:<SKU>})")
	logFlags(e, &c.logLevel, &c.logFormat)
	return e
}

// check refuses settings that are invalid or contradict each other.
func (c serveConfig) check() error {
	switch s := orders.Strategy(c.strategy); {
	case !s.Valid():
		return fmt.Errorf("unknown strategy %q (want %s)", c.strategy, strategyList())
	case s == orders.StrategyUnsafe && !c.allowOversell:
		return errors.New("strategy unsafe oversells on purpose: it runs only with --allow-oversell")
	}
	if c.lockReplicas < 0 {
		return errors.New("lock-replicas must be 0 or more")
	}
	// Every URL is checked before anything is opened.
	if err := gormstore.CheckURL(c.databaseURL); err != nil {
		return fmt.Errorf("database-url: %w", err)
	}
	if c.redisURL != "" {
		if err := rediscache.CheckURL(c.redisURL); err != nil {
			return fmt.Errorf("redis-url: %w", redactURLError(err))
		}
	}
	if err := checkLockURL(c.lockURL, c.lockReplicas); err != nil {
		return err
	}
	if c.authRefresh <= 0 || c.failedAuthRate <= 0 || c.failedAuthBurst < 1 {
		return errors.New("auth-refresh and failed-auth-rate must be positive, failed-auth-burst at least 1")
	}
	if err := orders.ValidateClient(orders.Client{Name: "defaults", Scopes: []orders.Scope{orders.ScopeAdmin},
		MaxUnitsHeldPerSKU: int64(c.defaultMaxUnitsHeld), RateLimit: orders.RateLimit{PerSecond: c.defaultRate, Burst: c.defaultBurst}}); err != nil {
		return fmt.Errorf("default-max-units-held-per-sku, default-rate-limit, default-rate-burst: %w", err)
	}
	for _, p := range c.trustedProxies() {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			return fmt.Errorf("trusted-proxies: %q is neither an address nor a CIDR", p)
		}
	}
	if err := c.checkTLS(); err != nil {
		return err
	}
	if c.maxBatch < 1 || c.maxQueue < 1 || c.dbMaxConns < 1 {
		return errors.New("max-batch, max-queue and db-max-conns must be at least 1")
	}
	if c.lockWait <= 0 || c.lockTTL <= 0 || c.requestTimeout <= 0 || c.readHeaderTimeout <= 0 || c.readTimeout <= 0 ||
		c.idempotencyRetention <= 0 || c.unsafeWindow <= 0 || c.sweepInterval <= 0 || c.relayInterval <= 0 || c.eventRetention <= 0 ||
		c.webhookRetryFor <= 0 || c.webhookTimeout <= 0 || c.webhookDisableAfter <= 0 {
		return errors.New("lock-ttl, lock-wait, request-timeout, read-header-timeout, read-timeout, idempotency-retention, unsafe-window, sweep-interval, relay-interval, event-retention, webhook-retry-for, webhook-timeout and webhook-disable-after must be positive")
	}
	if _, err := webhook.ParseNetworks(c.webhookAllowNetworks); err != nil {
		return fmt.Errorf("webhook-allow-networks: %w", err)
	}
	if c.maxHoldTTL < orders.MinHoldTTL {
		return fmt.Errorf("max-hold-ttl must be at least %s", orders.MinHoldTTL)
	}
	if c.shutdownTimeout < c.requestTimeout {
		return errors.New("shutdown-timeout must be at least request-timeout, so requests in flight can finish")
	}
	// Settings that contradict each other: a wait no request lives to see out.
	if c.lockWait >= c.requestTimeout {
		return fmt.Errorf("lock-wait (%s) must be below request-timeout (%s): every request ends at request-timeout, so a longer wait would answer the request's timeout instead of busy", c.lockWait, c.requestTimeout)
	}
	return nil
}

// checkTLS refuses TLS settings that cannot mean what they say: a certificate
// without its key (or a key without its certificate) would serve plain HTTP
// where HTTPS was meant, and client certificates cannot be asked for over
// plain HTTP.
func (c serveConfig) checkTLS() error {
	if (c.tlsCertFile == "") != (c.tlsKeyFile == "") {
		return errors.New("tls-cert-file and tls-key-file go together: give both, or neither for plain HTTP")
	}
	if c.tlsClientCAFile != "" && c.tlsCertFile == "" {
		return errors.New("tls-client-ca-file needs tls-cert-file and tls-key-file: client certificates are asked for in a TLS handshake")
	}
	return nil
}

// tls says whether the replica serves HTTPS.
func (c serveConfig) tls() bool { return c.tlsCertFile != "" }

// batchTimeout bounds one lock-batch critical section, the lock wait included:
// a request's deadline.
func (c serveConfig) batchTimeout() time.Duration { return c.requestTimeout }

func strategyList() string {
	names := make([]string, len(orders.Strategies))
	for i, s := range orders.Strategies {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func parseMigrate(args []string, getenv func(string) string, stderr io.Writer) (migrateConfig, error) {
	var c migrateConfig
	e := newFlags("migrate", getenv, stderr)
	e.secret(&c.databaseURL, "database-url", "DATABASE_URL", "sqlite:stockguard.db", "database: postgres://..., mysql://... or sqlite:<path>")
	logFlags(e, &c.logLevel, &c.logFormat)
	return c, e.parse(args)
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationsAsText}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q (want text or json)", format)
	}
	return slog.New(httpapi.LogHandler(h)), nil
}

// durationsAsText writes durations as Go writes them ("5s", "1.5ms"), not as
// JSON's nanosecond integers.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// clientDefaults are a new client's limits when its request leaves them out.
func (c serveConfig) clientDefaults() auth.Defaults {
	return auth.Defaults{MaxUnitsHeldPerSKU: int64(c.defaultMaxUnitsHeld),
		RateLimit: orders.RateLimit{PerSecond: c.defaultRate, Burst: c.defaultBurst}}
}

// trustedProxies are --trusted-proxies' entries.
func (c serveConfig) trustedProxies() []string {
	var out []string
	for _, p := range strings.Split(c.trustedProxyList, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

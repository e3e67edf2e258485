package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/auth"
	"github.com/stockguard/stockguard/internal/embedredis"
	"github.com/stockguard/stockguard/internal/events"
	"github.com/stockguard/stockguard/internal/gormstore"
	"github.com/stockguard/stockguard/internal/httpapi"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/ratelimit"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/service"
	"github.com/stockguard/stockguard/internal/skulock"
	"github.com/stockguard/stockguard/internal/webhook"
	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// serve wires one replica and runs it until ctx ends, then shuts down gracefully:
// it stops accepting, lets requests in flight finish (their locks are released as
// each one's work ends), and closes its connections.
func serve(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	// The libraries' lines in the same format: those written with the standard
	// log package, and go-redis's.
	slog.SetDefault(log)
	rediscache.UseLogger(log)
	if cfg.strategy == string(orders.StrategyUnsafe) {
		log.Error("UNSAFE STRATEGY: this replica takes orders without any lock and WILL OVERSELL; it is the control group of a demo, never a deployment",
			"unsafe_window", cfg.unsafeWindow.String()) // widened on purpose, so that it oversells every time
	}

	// The certificate before anything is opened: a replica that cannot serve
	// what it was told to serve stops at once.
	var tlsConfig *tls.Config
	if cfg.tls() {
		reloader, err := newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, log, time.Now)
		if err != nil {
			return err
		}
		if tlsConfig, err = serverTLS(cfg, reloader); err != nil {
			return err
		}
	}

	// Redis first: its client connects lazily, so a bad URL is refused before
	// the database is opened and migrated; a Redis that does not answer yet is
	// only a warning (readiness says so, orders get 503 dependency-unavailable).
	rdb, closeRedis, err := openRedis(cfg.redisURL, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	pctx, cancel := context.WithTimeout(ctx, startTimeout)
	if err := rdb.Ping(pctx).Err(); err != nil {
		log.Warn("redis does not answer: not ready, and orders are refused (503 dependency-unavailable) until it does", "err", err)
	}
	cancel()

	// A replica stopped inside a transaction must not keep its SKU's row locked
	// past its lease (PostgreSQL; DATABASE_URL may set another value).
	db, sqlDB, err := openAndMigrate(ctx, gormstore.BoundIdleTransactions(cfg.databaseURL, cfg.lockTTL), log)
	if err != nil {
		return err
	}
	defer func() { _ = sqlDB.Close() }()
	if db.Name() != "sqlite" {
		sqlDB.SetMaxOpenConns(cfg.dbMaxConns)
		sqlDB.SetMaxIdleConns(cfg.dbMaxConns)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every call of the Redis client: the cache, redis-atomic's counters,
	// lock-polling's locks, and pkg/lock's Redis locks when --lock-url is empty
	// (a lock service of its own has clients of its own, not counted).
	rdb.AddHook(redisRoundTrips(reg))
	lockMetrics := lockprom.New("stockguard")
	reg.MustRegister(lockMetrics)
	obs := newObserver(reg, log)
	eobs := newEventObserver(reg)

	keys := redislease.Keys{Namespace: cfg.namespace}
	ls, err := openLockService(ctx, cfg, rdb, lockMetrics, log)
	if err != nil {
		return err
	}
	defer ls.close()
	locks, err := lock.NewClient(ls.backend, &lock.Options{TTL: cfg.lockTTL, Wait: cfg.lockWait, Metrics: lockMetrics})
	if err != nil {
		return err
	}
	defer func() { _ = locks.Close() }()

	store := gormstore.New(db, time.Now, cfg.requestTimeout).WithAllocation(cfg.Allocation)
	// The leases of the jobs that run once per cluster (the sweeper's, and the
	// events relay's) have a lock client of their own, with metrics of their
	// own (stockguard_sweeper_lock_*): the replicas that wait for them all the
	// time would fill the SKU locks' wait and not-obtained figures.
	// stockguard_sweeper_leader and stockguard_events_relay_leading say who leads.
	leaseMetrics := lockprom.New("stockguard_sweeper")
	reg.MustRegister(leaseMetrics)
	leases, err := lock.NewClient(ls.backend, &lock.Options{TTL: cfg.lockTTL, Wait: cfg.lockWait, Metrics: leaseMetrics})
	if err != nil {
		return err
	}
	defer func() { _ = leases.Close() }()
	lockDep := orders.DependencyRedis // the cache's Redis
	if cfg.lockURL != "" {
		lockDep = orders.DependencyLockService
	}
	// The events relay publishes to the stream when --nats-url names one; it
	// is opened before the relay starts and closed after it stopped.
	stream, closeStream, err := openStream(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStream()
	// One guard judges a webhook's URL at registration and each of the
	// relay's connections when dialled (DNS may change in between).
	guard, err := newWebhookGuard(cfg.webhookAllowNetworks)
	if err != nil {
		return err
	}
	if allowed := guard.Allowed(); len(allowed) > 0 {
		log.Info("webhooks may reach these networks inside", "networks", fmt.Sprint(allowed))
	}
	leader := skulock.NewLocker(leases, lockDep)
	deps := service.Deps{Store: store, Cache: rediscache.NewCache(rdb, keys, time.Hour), Locker: skulock.NewLocker(locks, lockDep),
		Leader: leader, Observer: obs, Locations: store}
	edeps := events.Deps{Events: store, Stream: stream, Observer: eobs, Leader: leader, Fences: obs,
		Webhooks: store, Sender: newWebhookSender(cfg.webhookTimeout, guard), Retry: webhook.Policy{For: cfg.webhookRetryFor},
		Guard: guard}
	if !cfg.events {
		log.Info("events off: no stock event is written, no relay runs")
		deps.Store, edeps.Events, edeps.Stream = store.WithoutEvents(), nil, nil
	}
	switch orders.Strategy(cfg.strategy) {
	case orders.StrategyLockPolling:
		deps.Locker = rediscache.NewPollingLocker(rdb, keys, cfg.lockTTL, cfg.lockWait)
	case orders.StrategyRedisAtomic:
		deps.Counters = rediscache.NewCounters(rdb, keys, time.Hour)
	}
	svc := service.New(service.Config{Strategy: orders.Strategy(cfg.strategy), MaxBatch: cfg.maxBatch, MaxQueue: cfg.maxQueue,
		BatchTimeout: cfg.batchTimeout(), Retention: cfg.idempotencyRetention, UnsafeWindow: cfg.unsafeWindow,
		MaxHoldTTL: cfg.maxHoldTTL, SweepInterval: cfg.sweepInterval, LockTTL: cfg.lockTTL}, deps, log, time.Now)
	evs := events.New(events.Config{RelayInterval: cfg.relayInterval, EventRetention: cfg.eventRetention,
		WebhookDisableAfter: cfg.webhookDisableAfter}, edeps, log, time.Now)
	sweepCtx, stopSweeper := context.WithCancel(ctx)
	sweeping := make(chan struct{})
	go func() { defer close(sweeping); svc.RunSweeper(sweepCtx) }()
	defer func() { stopSweeper(); <-sweeping }() // its lease released before the connections close
	relayCtx, stopRelay := context.WithCancel(ctx)
	relaying := make(chan struct{})
	go func() { defer close(relaying); evs.RunRelay(relayCtx) }()
	defer func() { stopRelay(); <-relaying }() // the same: its lease released, then the stream and the connections closed
	ready := []httpapi.Dependency{
		{Name: orders.DependencyDatabase, Check: sqlDB.PingContext},
		{Name: orders.DependencyRedis, Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
	}
	if cfg.lockURL != "" {
		ready = append(ready, httpapi.Dependency{Name: orders.DependencyLockService, Check: ls.ping})
	}
	// Who may do what: every key seen is kept in memory and read again every
	// --auth-refresh, so that a revocation reaches this replica within it.
	authn := auth.NewAuthenticator(store, auth.Options{AdminToken: cfg.adminToken, Refresh: cfg.authRefresh, Timeout: cfg.requestTimeout, Logger: log})
	authCtx, stopAuth := context.WithCancel(ctx)
	defer stopAuth()
	go authn.Run(authCtx)
	clients := auth.NewManager(store, cfg.clientDefaults(), time.Now, authn)
	// With --metrics-addr, /metrics is served on that listener only: the API's
	// listener has no such route (nil).
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	apiMetrics := metrics
	if cfg.metricsAddr != "" {
		apiMetrics = nil
	}
	if cfg.insecureNoAuth {
		log.Error("INSECURE: --insecure-no-auth takes every request as the admin's, unchecked; it is the control group of a benchmark, never a deployment")
	}
	// The clients' rate limits, shared by the replicas in the cache's Redis.
	limits := rateLimits{ratelimit.New(rdb, ratelimit.Options{Namespace: cfg.namespace, Logger: log,
		FailedAuth: ratelimit.Limit{PerSecond: cfg.failedAuthRate, Burst: cfg.failedAuthBurst}})}
	//nolint:contextcheck // gin handlers take their context from the request
	handler := httpapi.New(httpapi.Config{Auth: authn, Clients: clients, Limiter: limits, TrustedProxies: cfg.trustedProxies(), NoAuth: cfg.insecureNoAuth,
		RequestTimeout: cfg.requestTimeout, AccessLog: cfg.accessLog},
		httpapi.UseCases{Orders: svc, Holds: svc, Stock: svc, Audit: svc, Locations: svc, Feed: evs, Webhooks: evs, Republisher: evs}, ready, apiMetrics, reg, log)

	srv := newHTTPServer(cfg, handler, log)
	srv.TLSConfig = tlsConfig
	errc := make(chan error, 2)
	if cfg.metricsAddr != "" {
		// Before the API's listener: a replica whose metrics cannot be served
		// does not announce an address.
		msrv, err := serveMetrics(ctx, cfg, metrics, log, errc)
		if err != nil {
			return err
		}
		// Closed after the API's listener has drained: a stopping replica's
		// last scrape still answers.
		defer func() { _ = msrv.Close() }()
	}
	ln, err := listenFor(ctx, srv, cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if cfg.adminToken == "" {
		log.Warn("no admin token: only the clients' API keys are accepted (make one with stockguard clients create)")
	}
	log.Info("serving", "addr", ln.Addr().String(), "tls", cfg.tls(), "client_certificates", cfg.tlsClientCAFile != "", "strategy", cfg.strategy, "lock_service", ls.kind, "lock_ttl", cfg.lockTTL, "lock_wait", cfg.lockWait, "lock_replicas", cfg.lockReplicas)
	announceListening(stdout, cfg.logFormat, ln.Addr().String())

	if cfg.pprofAddr != "" {
		stopPprof, err := servePprof(ctx, cfg.pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	go func() {
		if tlsConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate from TLSConfig.GetCertificate
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // drop what is left before the connections under it close
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// announceListening writes the first line of stdout, the address listened on,
// so that whoever started the replica on port 0 learns its port
// (topology.ListenAddr reads it): "listening on ADDR", or with --log-format json
// a JSON log record like every other line the replica writes, msg "listening".
func announceListening(stdout io.Writer, format, addr string) {
	if format == "json" {
		slog.New(slog.NewJSONHandler(stdout, nil)).Info("listening", "addr", addr)
		return
	}
	fmt.Fprintf(stdout, "listening on %s\n", addr)
}

// The handler's use cases: the orders', and the events'.
var (
	_ httpapi.Orders      = (*service.Service)(nil)
	_ httpapi.Holds       = (*service.Service)(nil)
	_ httpapi.Stock       = (*service.Service)(nil)
	_ httpapi.Auditor     = (*service.Service)(nil)
	_ httpapi.Feed        = (*events.Service)(nil)
	_ httpapi.Webhooks    = (*events.Service)(nil)
	_ httpapi.Republisher = (*events.Service)(nil)
)

// servePprof serves Go's profiles on their own address, apart from the API, so
// that a replica under load can be profiled where it runs.
func servePprof(ctx context.Context, addr string, log *slog.Logger) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving profiles", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// serveMetrics serves /metrics alone on --metrics-addr, plain HTTP: an internal
// address for Prometheus, apart from the API's listener and whatever TLS and
// client certificates that one asks for. Its serving error goes to errc.
func serveMetrics(ctx context.Context, cfg serveConfig, metrics http.Handler, log *slog.Logger, errc chan<- error) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: cfg.readHeaderTimeout, ReadTimeout: cfg.readTimeout,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ln, err := listenFor(ctx, srv, cfg.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("metrics: %w", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return srv, nil
}

// newHTTPServer is the http.Server of a replica. Its timeouts bound what a slow
// or stalled client can hold: a connection whose headers take longer than
// read-header-timeout, or whose whole request longer than read-timeout, is cut.
func newHTTPServer(cfg serveConfig, handler http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.readHeaderTimeout,
		ReadTimeout:       cfg.readTimeout,
		// A lock-batch order taken into a batch just before its request's deadline
		// waits for the batch's answer (it may be committing): the answer must not
		// be cut off.
		WriteTimeout:   cfg.requestTimeout + cfg.batchTimeout() + 5*time.Second,
		IdleTimeout:    60 * time.Second,
		MaxHeaderBytes: 16 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// listenFor listens on addr for srv: a new connection is idle until its first
// byte (idleUntilFirstByte), under srv's IdleTimeout.
func listenFor(ctx context.Context, srv *http.Server, addr string) (net.Listener, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return idleUntilFirstByte(ln, srv.IdleTimeout), nil
}

// openAndMigrate connects and applies the migrations; the caller closes sqlDB.
func openAndMigrate(ctx context.Context, databaseURL string, log *slog.Logger) (*gorm.DB, *sql.DB, error) {
	db, err := gormstore.Open(databaseURL)
	if err != nil {
		return nil, nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, err
	}
	n, err := gormstore.Migrate(ctx, db)
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, err
	}
	log.Info("database ready", "kind", db.Name(), "migrations_applied", n)
	return db, sqlDB, nil
}

// openRedis connects to REDIS_URL, or starts an embedded Redis when it is empty:
// fine for one replica, useless for several (they would not share it).
func openRedis(url string, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if url != "" {
		rdb, err := rediscache.NewClient(url)
		if err != nil {
			return nil, nil, err
		}
		return rdb, func() { _ = rdb.Close() }, nil
	}
	addr, stop, err := embedredis.Start()
	if err != nil {
		return nil, nil, err
	}
	log.Warn("REDIS_URL is not set: using an embedded Redis; replicas cannot share it", "addr", addr)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	return rdb, func() { _ = rdb.Close(); stop() }, nil
}

func migrate(ctx context.Context, cfg migrateConfig, stderr io.Writer) error {
	log, err := newLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	_, sqlDB, err := openAndMigrate(ctx, cfg.databaseURL, log)
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

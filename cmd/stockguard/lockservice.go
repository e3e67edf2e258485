package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease" // redis://, rediss://

	// The other lock services --lock-url may name: each registers its schemes
	// with lock.Open.
	_ "github.com/stockguard/stockguard/pkg/lock/etcdlock"
	_ "github.com/stockguard/stockguard/pkg/lock/pglock"
	_ "github.com/stockguard/stockguard/pkg/lock/redlock"
	_ "github.com/stockguard/stockguard/pkg/lock/zklock"
)

// lockService is the lock service the SKU locks and the sweeper's lease are
// taken from, as --lock-url chose it, checked to answer at start.
type lockService struct {
	backend lock.Backend
	kind    string                          // redis, redlock, postgres, etcd, zk or azblob
	ping    func(ctx context.Context) error // for readiness
	close   func()
}

// azureConnStringEnv names the variable that holds the storage account of an
// azblob:// --lock-url: its connection string is a secret, so it is not in the
// URL.
const azureConnStringEnv = azlease.ConnectionStringEnv

// openLockService opens the lock service of cfg.lockURL with lock.Open (the
// backends are registered by this file's imports); an empty URL is the cache's
// Redis (rdb), as before there was a choice. A bad URL or a service that does
// not answer within 5s (startTimeout; each backend bounds its own check) fails here, before the replica serves. Every
// service's resources are under cfg.namespace (PostgreSQL's one table
// excepted); m counts the Redis backend's waits for --lock-replicas. An azblob
// service's account is cfg.azureConnString, which no error shows.
func openLockService(ctx context.Context, cfg serveConfig, rdb redis.UniversalClient, m *lockprom.Metrics, log *slog.Logger) (*lockService, error) {
	redisOpt := redislease.Options{Keys: redislease.Keys{Namespace: cfg.namespace}, Replicas: cfg.lockReplicas, ReplicaTimeout: lockReplicaTimeout(cfg), Metrics: m}
	if cfg.lockURL == "" {
		b, err := redislease.New(rdb, &redisOpt)
		if err != nil {
			return nil, err
		}
		// The cache's Redis: readiness pings it as the cache already.
		return &lockService{backend: b, kind: "redis", ping: func(context.Context) error { return nil }, close: func() {}}, nil
	}
	if err := checkLockURL(cfg.lockURL, cfg.lockReplicas); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.lockURL) // checked
	// Each backend bounds its check that the service answers (5s, as
	// startTimeout), and PostgreSQL's migration after it is not cut short.
	s, err := lock.Open(ctx, cfg.lockURL, lock.WithNamespace(cfg.namespace),
		redislease.WithOptions(redisOpt), azlease.WithConnectionString(cfg.azureConnString))
	if err != nil {
		if errors.Is(err, lock.ErrInvalidOptions) {
			return nil, fmt.Errorf("lock-url: %w", err) // the backends' errors never show the URL
		}
		return nil, fmt.Errorf("lock service %s at %s does not answer: %w", u.Scheme, redactedHost(u), err)
	}
	log.Info("lock service", "kind", s.Kind, "at", redactedHost(u))
	return &lockService{backend: s.Backend, kind: s.Kind, ping: s.Ping, close: s.Close}, nil
}

// checkLockURL refuses a --lock-url that no lock service answers to: not a
// URL, a scheme no imported backend registered, or --lock-replicas with a
// service that is not Redis.
func checkLockURL(raw string, replicas int) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("lock-url: %w", redactURLError(err))
	}
	if schemes := lock.Schemes(); !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("lock-url: unknown scheme %q (want %s://)", u.Scheme, strings.Join(schemes, "://, "))
	}
	if replicas > 0 && u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("lock-replicas applies to a Redis lock service, not %s://", u.Scheme)
	}
	return nil
}

// startTimeout bounds the check that a service answers at start.
const startTimeout = 5 * time.Second

// lockReplicaTimeout is how long an obtain waits for --lock-replicas: half the
// lock client's call timeout (TTL/3), as redislease.NewClient defaults it.
func lockReplicaTimeout(cfg serveConfig) time.Duration { return cfg.lockTTL / 6 }

// redactedHost is the scheme and hosts of u, without its password.
func redactedHost(u *url.URL) string { return u.Scheme + "://" + u.Host }

// redactURLError drops the URL (and so any password in it) from a parse error.
func redactURLError(err error) error {
	if ue, ok := err.(*url.Error); ok { //nolint:errorlint // url.Parse returns *url.Error itself
		return ue.Err
	}
	return err
}

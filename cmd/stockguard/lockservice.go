package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/pkg/lock"
)

// lockService is the lock service the SKU locks and the sweeper's lease are
// taken from, as --lock-url chose it, checked to answer at start.
type lockService struct {
	backend lock.Backend
	kind    string                          // redis, redlock or postgres
	ping    func(ctx context.Context) error // for readiness
	close   func()
}

// lockKinds names the schemes --lock-url accepts, for its errors.
const lockKinds = "redis://, rediss://, redlock://, postgres://, etcd://, zk:// or azblob://"

// openLockService opens the lock service of cfg.lockURL; an empty URL is the
// cache's Redis (rdb), as before there was a choice. A bad URL or a service that
// does not answer within startTimeout fails here, before the replica serves.
// m counts the Redis backend's waits for --lock-replicas.
func openLockService(ctx context.Context, cfg serveConfig, rdb redis.UniversalClient, m *lock.Metrics, log *slog.Logger) (*lockService, error) {
	keys := lock.Keys{Namespace: cfg.namespace}
	redisBackend := func(c redis.UniversalClient) (lock.Backend, error) {
		return lock.NewRedis(c, &lock.RedisOptions{Keys: keys, Replicas: cfg.lockReplicas, ReplicaTimeout: lockReplicaTimeout(cfg), Metrics: m})
	}
	if cfg.lockURL == "" {
		b, err := redisBackend(rdb)
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
	var s *lockService
	switch u.Scheme {
	case "redis", "rediss":
		c, err := rediscache.NewClient(cfg.lockURL)
		if err != nil {
			return nil, fmt.Errorf("lock-url: %w", err)
		}
		b, err := redisBackend(c)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		s = &lockService{backend: b, kind: "redis", ping: func(ctx context.Context) error { return c.Ping(ctx).Err() }, close: func() { _ = c.Close() }}
	default:
		var err error
		if s, err = openOtherLockService(ctx, u, cfg); err != nil {
			return nil, err
		}
	}
	pctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := s.ping(pctx); err != nil {
		s.close()
		return nil, fmt.Errorf("lock service %s at %s does not answer: %w", s.kind, redactedHost(u), err)
	}
	log.Info("lock service", "kind", s.kind, "at", redactedHost(u))
	return s, nil
}

// checkLockURL refuses a --lock-url that no lock service answers to: not a
// URL, an unknown scheme, or --lock-replicas with a service that is not Redis.
func checkLockURL(raw string, replicas int) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("lock-url: %w", redactURLError(err))
	}
	switch u.Scheme {
	case "redis", "rediss", "redlock", "postgres", "postgresql", "etcd", "zk", "azblob":
	default:
		return fmt.Errorf("lock-url: unknown scheme %q (want %s)", u.Scheme, lockKinds)
	}
	if replicas > 0 && u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("lock-replicas applies to a Redis lock service, not %s://", u.Scheme)
	}
	return nil
}

// startTimeout bounds the check that a service answers at start.
const startTimeout = 5 * time.Second

// lockReplicaTimeout is how long an obtain waits for --lock-replicas: half the
// lock client's call timeout (TTL/3), as lock.Options defaults it.
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

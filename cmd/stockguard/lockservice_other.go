package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/pglock"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

// openOtherLockService opens the lock services that are not one Redis.
func openOtherLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	switch u.Scheme {
	case "redlock":
		opts, err := redlock.ParseURL(cfg.lockURL)
		if err != nil {
			return nil, fmt.Errorf("lock-url: %w", err)
		}
		clients := make([]redis.UniversalClient, len(opts))
		for i, o := range opts {
			clients[i] = redis.NewClient(o)
		}
		closeAll := func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}
		b, err := redlock.New(clients, &redlock.Options{Keys: lock.Keys{Namespace: cfg.namespace}})
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("lock-url: %w", err)
		}
		return &lockService{backend: b, kind: "redlock", ping: b.Ping, close: closeAll}, nil
	case "postgres", "postgresql":
		// The lock table lives in that database, the store's or another; every
		// replica's Open creates it if missing (under an advisory lock).
		b, closePool, err := pglock.Open(ctx, cfg.lockURL, nil)
		if err != nil {
			return nil, fmt.Errorf("lock service postgres at %s: %w", redactedHost(u), err)
		}
		return &lockService{backend: b, kind: "postgres", ping: b.Ping, close: closePool}, nil
	case "etcd":
		return openEtcdLockService(ctx, u, cfg)
	case "zk":
		return openZooKeeperLockService(ctx, u, cfg)
	case "azblob":
		return openAzblobLockService(ctx, u, cfg)
	}
	return nil, fmt.Errorf("lock-url: unknown scheme %q (want %s)", u.Scheme, lockKinds)
}

package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/stockguard/stockguard/pkg/lock/pglock"
)

// openOtherLockService opens the lock services that are not one Redis.
func openOtherLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	switch u.Scheme {
	case "postgres", "postgresql":
		// The lock table lives in that database, the store's or another; every
		// replica's Open creates it if missing (under an advisory lock).
		b, closePool, err := pglock.Open(ctx, cfg.lockURL, nil)
		if err != nil {
			return nil, fmt.Errorf("lock service postgres at %s: %w", redactedHost(u), err)
		}
		return &lockService{backend: b, kind: "postgres", ping: b.Ping, close: closePool}, nil
	}
	return nil, fmt.Errorf("lock-url: unknown scheme %q (want %s)", u.Scheme, lockKinds)
}

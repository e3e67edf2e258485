package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// openZooKeeperLockService opens the ZooKeeper ensemble of a zk:// URL: one
// session per replica, the resources under <chroot>/stockguard/<namespace>. A
// session that does not answer within startTimeout stops the replica at start.
func openZooKeeperLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	if _, _, err := zklock.ParseURL(cfg.lockURL); err != nil {
		return nil, fmt.Errorf("lock-url: %w", err) // never shows the URL
	}
	octx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	b, err := zklock.Open(octx, cfg.lockURL, &zklock.Options{Root: "/stockguard/" + cfg.namespace})
	if err != nil {
		// zklock's errors name the hosts only, never the URL's path.
		return nil, fmt.Errorf("lock service zk at %s does not answer: %w", redactedHost(u), err)
	}
	return &lockService{backend: b, kind: "zk", ping: b.Ping, close: b.Close}, nil
}

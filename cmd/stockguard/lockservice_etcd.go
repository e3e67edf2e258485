package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

// openEtcdLockService opens the etcd lock service of an etcd:// URL; the keys
// live under the URL's path (etcdlock.DefaultPrefix without one). Open checks
// that etcd answers, within startTimeout.
func openEtcdLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	octx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	b, closeAll, err := etcdlock.Open(octx, cfg.lockURL, nil)
	if err != nil {
		return nil, fmt.Errorf("lock service etcd at %s does not answer: %w", redactedHost(u), err)
	}
	return &lockService{backend: b, kind: "etcd", ping: b.Ping, close: closeAll}, nil
}

package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

// openEtcdLockService opens the etcd lock service of an etcd:// URL; the keys
// live under the URL's path, or without one under stockguard/<namespace>/ (as
// ZooKeeper's nodes and Redis's keys are per namespace). Open checks that etcd
// answers, within startTimeout.
func openEtcdLockService(ctx context.Context, u *url.URL, cfg serveConfig) (*lockService, error) {
	var opt *etcdlock.Options
	if strings.Trim(u.Path, "/") == "" {
		opt = &etcdlock.Options{Prefix: "stockguard/" + cfg.namespace + "/"}
	}
	octx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	b, closeAll, err := etcdlock.Open(octx, cfg.lockURL, opt)
	if err != nil {
		return nil, fmt.Errorf("lock service etcd at %s does not answer: %w", redactedHost(u), err)
	}
	return &lockService{backend: b, kind: "etcd", ping: b.Ping, close: closeAll}, nil
}

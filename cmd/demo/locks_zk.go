package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startZooKeeper starts a private ZooKeeper for -lock zk and returns its
// --lock-url and a function that stops it and removes its directory.
func startZooKeeper(ctx context.Context, log *slog.Logger) (string, func(), error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := lockserver.StartZooKeeper(sctx, "")
	if errors.Is(err, lockserver.ErrNotInstalled) {
		return "", nil, fmt.Errorf("-lock zk starts a private ZooKeeper, which needs java and ZooKeeper's jars (a distribution's zookeeper package, or ZOOKEEPER_HOME): %w", err)
	}
	if err != nil {
		return "", nil, fmt.Errorf("-lock zk: %w", err)
	}
	log.Info("started a private ZooKeeper", "addr", s.Addr)
	return "zk://" + s.Addr, func() { _ = s.Close() }, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"

	"github.com/stockguard/stockguard/internal/topology"
)

// startLockService returns the replicas' STOCKGUARD_LOCK_URL for -lock kind:
// empty for redis (the cache's Redis), three private redis-servers for redlock,
// the database itself for postgres, a private etcd, ZooKeeper or Azurite for
// etcd, zk and azblob.
func startLockService(ctx context.Context, kind, databaseURL string, log *slog.Logger) (string, func(), error) {
	switch kind {
	case "redis":
		return "", func() {}, nil
	case "redlock":
		path, err := exec.LookPath("redis-server")
		if err != nil {
			return "", nil, errors.New("-lock redlock starts three redis-servers: none is on the PATH")
		}
		addrs, stopAll, err := topology.StartRedisServers(ctx, path, 3)
		if err != nil {
			return "", nil, err
		}
		log.Info("started three private redis-servers for Redlock", "addrs", addrs)
		return "redlock://" + strings.Join(addrs, ",") + "/0", stopAll, nil
	case "postgres":
		if !strings.HasPrefix(databaseURL, "postgres://") && !strings.HasPrefix(databaseURL, "postgresql://") {
			return "", nil, errors.New("-lock postgres takes its locks in the PostgreSQL of DATABASE_URL: set DATABASE_URL to a postgres:// URL")
		}
		return databaseURL, func() {}, nil
	case "etcd":
		return startEtcdLockService(ctx, log)
	case "zk":
		return startZooKeeper(ctx, log)
	case "azblob":
		return startAzurite(ctx, log)
	default:
		return "", nil, fmt.Errorf("-lock %q: want redis, redlock, postgres, etcd, zk or azblob", kind)
	}
}

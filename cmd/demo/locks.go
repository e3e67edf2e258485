package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/topology"
	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
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

// startEtcdLockService starts a private etcd (from the PATH) for -lock etcd and
// returns its --lock-url and the function that stops it and removes its data.
func startEtcdLockService(ctx context.Context, log *slog.Logger) (string, func(), error) {
	s, err := lockserver.StartEtcd(ctx, "")
	if errors.Is(err, lockserver.ErrNotInstalled) {
		return "", nil, errors.New("-lock etcd starts a private etcd: no etcd is on the PATH (Debian: apt-get install etcd-server)")
	}
	if err != nil {
		return "", nil, fmt.Errorf("-lock etcd: %w", err)
	}
	log.Info("started a private etcd for the locks", "addr", s.Addr, "dir", s.Dir)
	return "etcd://" + s.Addr + "/stockguard-demo", func() { _ = s.Close() }, nil
}

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

// startAzurite starts a private Azurite for -lock azblob and sets
// AZURE_STORAGE_CONNECTION_STRING to its account in this process's
// environment, which the replicas inherit; stop ends Azurite, removes its
// directory and puts the variable back.
func startAzurite(ctx context.Context, log *slog.Logger) (string, func(), error) {
	s, err := lockserver.StartAzurite(ctx, "")
	if errors.Is(err, lockserver.ErrNotInstalled) {
		return "", nil, fmt.Errorf("-lock azblob starts a private Azurite: %w", err)
	}
	if err != nil {
		return "", nil, err
	}
	old, had := os.LookupEnv(azlease.ConnectionStringEnv)
	if err := os.Setenv(azlease.ConnectionStringEnv, s.ConnectionString); err != nil {
		_ = s.Close()
		return "", nil, err
	}
	log.Info("started a private Azurite for the Azure blob lease locks", "addr", s.Addr)
	stop := func() {
		if had {
			_ = os.Setenv(azlease.ConnectionStringEnv, old)
		} else {
			_ = os.Unsetenv(azlease.ConnectionStringEnv)
		}
		_ = s.Close()
	}
	return "azblob://stockguard-demo/sku/", stop, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startLockService returns the replicas' STOCKGUARD_LOCK_URL for -lock kind:
// empty for redis (the cache's Redis), the database itself for postgres, and
// for the others the private servers lockserver.StartService starts for the
// scheme (three redis-servers for redlock, an etcd, a ZooKeeper or an Azurite
// for etcd, zk and azblob).
func startLockService(ctx context.Context, kind, databaseURL string, log *slog.Logger) (string, func(), error) {
	switch kind {
	case "redis":
		return "", func() {}, nil
	case "postgres":
		if !strings.HasPrefix(databaseURL, "postgres://") && !strings.HasPrefix(databaseURL, "postgresql://") {
			return "", nil, errors.New("-lock postgres takes its locks in the PostgreSQL of DATABASE_URL: set DATABASE_URL to a postgres:// URL")
		}
		return databaseURL, func() {}, nil
	}
	path, ok := demoLockPaths[kind]
	if !ok {
		return "", nil, fmt.Errorf("-lock %q: want redis, postgres or one of %s", kind, strings.Join(lockserver.Schemes(), ", "))
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute) // a JVM on a loaded machine takes seconds
	defer cancel()
	s, err := lockserver.StartService(sctx, kind, "")
	if err != nil {
		return "", nil, fmt.Errorf("-lock %s starts private servers: %w", kind, err)
	}
	restore, err := setEnv(s.Env)
	if err != nil {
		_ = s.Close()
		return "", nil, err
	}
	addrs := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		addrs[i] = srv.Addr
	}
	log.Info("started private servers for the locks", "lock", kind, "addrs", addrs)
	return s.URL(path), func() { restore(); _ = s.Close() }, nil
}

// demoLockPaths are the path of each lock service's URL: Redlock's database,
// etcd's key prefix, none for ZooKeeper (no chroot), azblob's container and
// blob prefix.
var demoLockPaths = map[string]string{"redlock": "0", "etcd": "stockguard-demo", "zk": "", "azblob": "stockguard-demo/sku/"}

// setEnv sets the KEY=value pairs of env in this process's environment, which
// the replicas inherit (azblob's account), and returns what puts them back.
func setEnv(env []string) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		if err := os.Setenv(k, v); err != nil {
			restore()
			return nil, err
		}
		undo = append(undo, func() {
			if had {
				_ = os.Setenv(k, old)
			} else {
				_ = os.Unsetenv(k)
			}
		})
	}
	return restore, nil
}

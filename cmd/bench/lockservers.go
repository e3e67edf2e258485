package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// benchLockPaths are the path of each privately served lock service's URL:
// Redlock's database, none for etcd and ZooKeeper (keys under each cluster's
// namespace), azblob's container (blobs under each cluster's namespace).
var benchLockPaths = map[string]string{"redlock": "0", "etcd": "", "zk": "", "azblob": "bench-locks"}

// startLockServers starts the private servers of lock service name (redlock,
// etcd, zk or azblob: lockserver.StartService) and returns the replicas'
// environment for it and how to stop it; their processes go to b.pids, for
// their CPU time, and Redlock's masters get a client each in b.redlock. When a
// server is not installed it returns why instead (notRun), or an error when
// require.
func (b *locksBench) startLockServers(ctx context.Context, name string, require bool) (env []string, stop func(), notRun string, err error) {
	path, ok := benchLockPaths[name]
	if !ok {
		return nil, nil, "", fmt.Errorf("locks: no server to start for %q", name)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := lockserver.StartService(sctx, name, "")
	if errors.Is(err, lockserver.ErrNotInstalled) && !require {
		return nil, nil, err.Error(), nil
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("locks: %s: %w", name, err)
	}
	var addrs []string
	for _, srv := range s.Servers {
		addrs = append(addrs, srv.Addr)
		if pid := srv.Pid(); pid > 0 {
			b.pids[name] = append(b.pids[name], pid)
		}
		if name == "redlock" {
			b.redlock = append(b.redlock, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		}
	}
	b.log.Info("locks: started private servers", "lock_service", name, "addrs", addrs)
	stop = func() {
		for _, c := range b.redlock {
			_ = c.Close()
		}
		b.redlock = nil
		_ = s.Close()
	}
	return append([]string{"STOCKGUARD_LOCK_URL=" + s.URL(path)}, s.Env...), stop, "", nil
}

// lockURLOf is the STOCKGUARD_LOCK_URL of env, "" when it has none.
func lockURLOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "STOCKGUARD_LOCK_URL="); ok {
			return v
		}
	}
	return ""
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startLockServer starts the private server of lock service name (etcd, zk or
// azblob) and returns the replicas' environment for it and how to stop it.
// pid is the server's process, for its CPU time. When the server is not installed it returns why instead (notRun), or an
// error when require.
func startLockServer(ctx context.Context, name string, require bool, log *slog.Logger) (env []string, pid int, stop func(), notRun string, err error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var srv *lockserver.Server
	switch name {
	case "etcd":
		if srv, err = lockserver.StartEtcd(sctx, ""); err == nil {
			env = []string{"STOCKGUARD_LOCK_URL=etcd://" + srv.Addr} // keys under each cluster's namespace
		}
	case "zk":
		if srv, err = lockserver.StartZooKeeper(sctx, ""); err == nil {
			env = []string{"STOCKGUARD_LOCK_URL=zk://" + srv.Addr}
		}
	case "azblob":
		var az *lockserver.AzuriteServer
		if az, err = lockserver.StartAzurite(sctx, ""); err == nil {
			srv = az.Server // blobs under each cluster's namespace, in one container
			env = []string{"STOCKGUARD_LOCK_URL=azblob://bench-locks", "AZURE_STORAGE_CONNECTION_STRING=" + az.ConnectionString}
		}
	default:
		return nil, 0, nil, "", fmt.Errorf("locks: no server to start for %q", name)
	}
	if errors.Is(err, lockserver.ErrNotInstalled) && !require {
		return nil, 0, nil, err.Error(), nil
	}
	if err != nil {
		return nil, 0, nil, "", fmt.Errorf("locks: %s: %w", name, err)
	}
	log.Info("locks: started a private server", "lock_service", name, "addr", srv.Addr)
	return env, srv.Pid(), func() { _ = srv.Close() }, "", nil
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

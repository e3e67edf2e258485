package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

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

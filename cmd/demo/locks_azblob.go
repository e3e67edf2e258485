package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

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

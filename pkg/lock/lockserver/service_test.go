package lockserver_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// Installed looks the servers up without starting them, and says the same as
// the starter would: a missing one wraps ErrNotInstalled, a present one is nil,
// an unknown scheme is neither.
func TestInstalled(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-azurite-blob")
	t.Setenv(lockserver.AzuriteEnv, missing)
	err := lockserver.Installed("azblob")
	if !errors.Is(err, lockserver.ErrNotInstalled) {
		t.Fatalf("azblob with $%s=%s: %v, want ErrNotInstalled", lockserver.AzuriteEnv, missing, err)
	}
	if _, startErr := lockserver.StartAzurite(t.Context(), t.TempDir()); startErr == nil || startErr.Error() != err.Error() {
		t.Errorf("Installed says %q, StartAzurite %q: want the same words", err, startErr)
	}

	present := filepath.Join(t.TempDir(), "azurite-blob")
	if err := os.WriteFile(present, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(lockserver.AzuriteEnv, present)
	if err := lockserver.Installed("azblob"); err != nil {
		t.Errorf("azblob with $%s=%s: %v, want nil", lockserver.AzuriteEnv, present, err)
	}

	if err := lockserver.Installed("ftp"); err == nil || errors.Is(err, lockserver.ErrNotInstalled) {
		t.Errorf("an unknown scheme: %v, want an error that is not ErrNotInstalled", err)
	}
}

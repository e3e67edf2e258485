package azlease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startAzurite starts a private Azurite for the test, or skips the test when
// it is not installed (fails it under STOCKGUARD_TEST_REQUIRE_REAL=1).
func startAzurite(t testing.TB) *lockserver.AzuriteServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := lockserver.StartAzurite(ctx, t.TempDir())
	if errors.Is(err, lockserver.ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// containerURL is an azblob:// URL of a container of the test's own.
func containerURL(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "azblob://t-" + hex.EncodeToString(b) + "/locks/"
}

// open opens a Backend on url as a process would: a client of its own.
func open(t testing.TB, s *lockserver.AzuriteServer, url string) *azlease.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, closeIdle, err := azlease.Open(ctx, url, s.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIdle)
	return b
}

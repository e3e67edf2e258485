package azlease_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/azlease"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// startAzurite starts a private Azurite for the test (lockservertest).
func startAzurite(t testing.TB) *lockserver.AzuriteServer {
	t.Helper()
	return lockservertest.Azurite(t)
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

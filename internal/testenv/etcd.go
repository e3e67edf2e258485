package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// Etcd is a private single-member etcd for a test that may pause, kill or
// restart it (lockserver.Server), and the --lock-url of a key prefix of its own.
type Etcd struct {
	*lockserver.Server
	// URL is the --lock-url: etcd://<addr>/stockguard-test/.
	URL string
}

// StartEtcd starts a private etcd on free loopback ports and removes it when the
// test ends. Without the etcd binary the test is skipped, or fails under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := lockserver.StartEtcd(ctx, t.TempDir())
	if errors.Is(err, lockserver.ErrNotInstalled) && !RequireReal() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &Etcd{Server: s, URL: "etcd://" + s.Addr + "/stockguard-test"}
}

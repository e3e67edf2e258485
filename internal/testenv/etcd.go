package testenv

import (
	"testing"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// Etcd is a private single-member etcd for a test that may pause, kill or
// restart it (lockserver.Server), and the --lock-url of a key prefix of its own.
type Etcd struct {
	*lockserver.Server
	// URL is the --lock-url: etcd://<addr>/stockguard-test/.
	URL string
}

// StartEtcd starts a private etcd for the test (lockservertest.Etcd: skipped
// when not installed, or failed under STOCKGUARD_TEST_REQUIRE_REAL=1).
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	s := lockservertest.Etcd(t)
	return &Etcd{Server: s, URL: "etcd://" + s.Addr + "/stockguard-test"}
}

package testenv

import (
	"testing"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// ZooKeeper is a private standalone ZooKeeper server for a test.
type ZooKeeper struct {
	*lockserver.Server
}

// StartZooKeeper starts a private ZooKeeper server for the test
// (lockservertest.ZooKeeper: skipped when not installed, or failed under
// STOCKGUARD_TEST_REQUIRE_REAL=1).
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	return &ZooKeeper{Server: lockservertest.ZooKeeper(t)}
}

// URL is the --lock-url of the server, with a chroot of the test's own.
func (z *ZooKeeper) URL() string { return "zk://" + z.Addr + "/t" + RandomID() }

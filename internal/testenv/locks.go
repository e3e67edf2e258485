package testenv

import (
	"strings"
	"testing"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// NeedLockService skips the test, with the reason every test that starts those
// servers skips with, when the private servers of lock service kind (redlock,
// etcd, zk, azblob) are not on this machine; under STOCKGUARD_TEST_REQUIRE_REAL=1
// it fails it instead. redis and postgres need no server of their own: nothing
// to check. It starts nothing, so a test can ask before its own work.
func NeedLockService(t testing.TB, kind string) {
	t.Helper()
	if kind == "redis" || kind == "postgres" {
		return
	}
	lockservertest.NeedService(t, kind)
}

// LockKinds are the lock services the service can run on, as --lock-url
// chooses them.
func LockKinds() []string { return []string{"redis", "redlock", "postgres", "etcd", "zk", "azblob"} }

// Redlock is three private redis-servers, the independent masters of a
// Redlock lock service.
type Redlock struct {
	Nodes []*RedisServer
}

// StartRedlock starts three redis-servers on free loopback ports (see
// StartRedisServer) and stops them when the test ends.
func StartRedlock(t testing.TB) *Redlock {
	t.Helper()
	r := &Redlock{}
	for range 3 {
		r.Nodes = append(r.Nodes, StartRedisServer(t))
	}
	return r
}

// URL is the --lock-url of the three masters.
func (r *Redlock) URL() string {
	addrs := make([]string, len(r.Nodes))
	for i, n := range r.Nodes {
		addrs[i] = n.Addr
	}
	return "redlock://" + strings.Join(addrs, ",") + "/0"
}

// LockURL returns a --lock-url of kind for a test: empty for redis (the cache's
// Redis), three private masters for redlock, a PostgreSQL schema of its own
// for postgres, a private server for etcd and zk, a private Azurite for azblob
// (UseAzurite: its account in AZURE_STORAGE_CONNECTION_STRING). Each is
// removed when the test ends.
func LockURL(t testing.TB, kind string) string {
	t.Helper()
	switch kind {
	case "redis":
		return ""
	case "redlock":
		return StartRedlock(t).URL()
	case "postgres":
		return NewDatabase(t, Postgres)
	case "etcd":
		return StartEtcd(t).URL
	case "zk":
		return StartZooKeeper(t).URL()
	case "azblob":
		return UseAzurite(t)
	}
	t.Fatalf("unknown lock service %q", kind)
	return ""
}

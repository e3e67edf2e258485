package redislease_test

// The Redis the tests of this package run against: lockservertest's, the lock
// module's one set of test servers (STOCKGUARD_TEST_REDIS_URL, else a private
// redis-server, else miniredis; each test its own key namespace). Tests that
// stop, stall, kill or restart a server start their own (startRedisServer).

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// The test Redis (lockservertest.NewRedis) under the names this package's
// tests use.
type testRedis = lockservertest.TestRedis

func newRedis(tb testing.TB) *testRedis                { return lockservertest.NewRedis(tb) }
func newRedisAt(tb testing.TB, addr string) *testRedis { return lockservertest.NewRedisAt(tb, addr) }
func requireReal() bool                                { return lockservertest.RequireReal() }
func randomID() string                                 { return lockservertest.RandomID() }

// commandCalls sums the calls in INFO commandstats (lockservertest.CommandCalls).
func commandCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
	return lockservertest.CommandCalls(ctx, c)
}

// redisServer is a private redis-server for tests that stop, stall, kill or
// restart it (lockservertest.RedisServer).
type redisServer = lockservertest.RedisServer

// startRedisServer starts a redis-server on a free loopback port and stops it when
// the test ends (lockservertest.Redis).
func startRedisServer(tb testing.TB) *redisServer { return lockservertest.Redis(tb) }

// noLeaks takes goleak's snapshot of the goroutines running now and returns the
// check that no other is left (defer noLeaks(t)()). The goroutines of an
// in-process miniredis (its clock, its connections) are ignored: they belong to
// the server, not to the code under test.
func noLeaks(t *testing.T) func() {
	t.Helper()
	current := goleak.IgnoreCurrent()
	return func() {
		t.Helper()
		goleak.VerifyNone(t, current,
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func1"),
			goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"),
			goleak.IgnoreAnyFunction("github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest.startMiniredis.func1"))
	}
}

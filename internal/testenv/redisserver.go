package testenv

import (
	"testing"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// RedisServer is a private redis-server for tests that stop, stall, kill or
// restart it (lockservertest.RedisServer). It keeps nothing on disk and allows
// DEBUG (for DEBUG SLEEP).
type RedisServer = lockservertest.RedisServer

// StartRedisServer starts a redis-server on a free loopback port and stops it when
// the test ends (lockservertest.Redis). Without redis-server on the PATH the
// test is skipped, or fails under STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	return lockservertest.Redis(t)
}

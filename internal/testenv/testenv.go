// Package testenv gives tests the real services they need: the Redis and the
// database named by STOCKGUARD_TEST_REDIS_URL and STOCKGUARD_TEST_DATABASE_URL, or
// embedded stand-ins when those are not set. With STOCKGUARD_TEST_REQUIRE_REAL=1 (CI
// sets it) a missing service fails the test instead of falling back or skipping.
package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// The Redis half is the lock module's (lockservertest), so that both modules'
// tests meet Redis one way; this package adds the database and the topologies.

// RequireReal reports whether the run must use real services (CI).
func RequireReal() bool { return lockservertest.RequireReal() }

// Redis is one test's view of a Redis server: how to reach it and the namespace
// its keys live under, removed when the test ends (lockservertest.TestRedis).
type Redis = lockservertest.TestRedis

// NewRedis returns the Redis of STOCKGUARD_TEST_REDIS_URL, else a private
// redis-server when one is on the PATH, else miniredis (outside CI).
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	return lockservertest.NewRedis(t)
}

// NewRedisAt is NewRedis on a private server (StartRedisServer), which goes away
// with its keys when the test ends.
func NewRedisAt(t testing.TB, addr string) *Redis { return lockservertest.NewRedisAt(t, addr) }

// RandomID returns 12 random hex characters, for names that must not collide with
// other tests or earlier runs on shared servers.
func RandomID() string { return lockservertest.RandomID() }

// CommandCalls sums the calls in INFO commandstats, commands run by scripts
// included, so a benchmark can report Redis commands per operation.
func CommandCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
	return lockservertest.CommandCalls(ctx, c)
}

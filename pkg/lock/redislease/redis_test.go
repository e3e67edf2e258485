package redislease_test

// The Redis the tests of this package run against. The package keeps its own
// helper rather than the service's, so that its test binary links only what the
// library does: go-redis, redislock, Prometheus and the test-only miniredis.
//
// STOCKGUARD_TEST_REDIS_URL names a server to use; without it a private
// redis-server is started on a free port when one is on the PATH, else an
// embedded miniredis. With STOCKGUARD_TEST_REQUIRE_REAL=1 (CI sets it) a missing
// STOCKGUARD_TEST_REDIS_URL fails the test instead. Each test gets its own key
// namespace, whose keys are removed when it ends. Tests that stop, stall, kill or
// restart a server start their own (startRedisServer).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// go-redis logs its reconnection attempts; tests that kill servers on purpose
// would drown their own output in them.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// requireReal reports whether the run must use a real Redis (CI).
func requireReal() bool { return os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" }

// testRedis is one test's view of a Redis server: how to reach it and the
// namespace its keys live under.
type testRedis struct {
	opt       *redis.Options
	Namespace string
}

// newRedis returns the Redis of STOCKGUARD_TEST_REDIS_URL, else a private
// redis-server when one is on the PATH, else miniredis (outside CI). The test's
// keys are removed when it ends.
func newRedis(tb testing.TB) *testRedis {
	tb.Helper()
	r := &testRedis{Namespace: "t" + randomID()}
	switch url := os.Getenv("STOCKGUARD_TEST_REDIS_URL"); {
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			tb.Fatalf("STOCKGUARD_TEST_REDIS_URL: %v", err)
		}
		r.opt = opt
	case requireReal():
		tb.Fatal("STOCKGUARD_TEST_REQUIRE_REAL=1 but STOCKGUARD_TEST_REDIS_URL is not set")
	default:
		if _, err := exec.LookPath("redis-server"); err == nil {
			r.opt = &redis.Options{Addr: startRedisServer(tb).Addr}
		} else {
			r.opt = &redis.Options{Addr: startMiniredis(tb)}
		}
	}
	tb.Cleanup(func() { r.cleanup(tb) })
	return r
}

// newRedisAt is newRedis on a private server (startRedisServer), which goes away
// with its keys when the test ends.
func newRedisAt(_ testing.TB, addr string) *testRedis {
	return &testRedis{Namespace: "t" + randomID(), opt: &redis.Options{Addr: addr}}
}

// Client returns a new client with its own connection pool, as a separate replica
// would have. It is closed when the test ends.
func (r *testRedis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt := *r.opt
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *testRedis) cleanup(tb testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opt := *r.opt
	c := redis.NewClient(&opt)
	defer func() { _ = c.Close() }()
	// Keys are named {<namespace>:<name>}:..., or start with the namespace.
	for _, pattern := range []string{"{" + r.Namespace + ":*", r.Namespace + "*"} {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Logf("cleaning Redis: %v", err)
		}
	}
}

// randomID returns 12 random hex characters, for names that must not collide with
// other tests or earlier runs on a shared server.
func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redisServer is a private redis-server for tests that stop, stall, kill or
// restart it (lockservertest.RedisServer).
type redisServer = lockservertest.RedisServer

// startRedisServer starts a redis-server on a free loopback port and stops it when
// the test ends (lockservertest.Redis).
func startRedisServer(tb testing.TB) *redisServer { return lockservertest.Redis(tb) }

// commandCalls sums the calls in INFO commandstats, commands run by scripts
// included, so a benchmark can report Redis commands per operation.
func commandCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, rest, _ := strings.Cut(line, ":calls=")
		n, _, _ := strings.Cut(rest, ",")
		var v int64
		for _, ch := range n {
			if ch < '0' || ch > '9' {
				break
			}
			v = v*10 + int64(ch-'0')
		}
		total += v
	}
	return total, nil
}

// startMiniredis runs a miniredis whose clock keeps real time (it moves only when
// told, and leases must expire for the tests of a dead holder), stopped when the
// test ends.
func startMiniredis(tb testing.TB) string {
	tb.Helper()
	mr := miniredis.RunT(tb)
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	tb.Cleanup(func() { close(done); <-finished })
	return mr.Addr()
}

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
			goleak.IgnoreAnyFunction("github.com/stockguard/stockguard/pkg/lock_test.startMiniredis.func1"))
	}
}

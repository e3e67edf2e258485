package lockservertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The Redis a test runs against, shared by the lock module's tests and the
// service's (internal/testenv): STOCKGUARD_TEST_REDIS_URL names a server to use;
// without it a private redis-server is started on a free port when one is on
// the PATH, else an embedded miniredis. With STOCKGUARD_TEST_REQUIRE_REAL=1 (CI
// sets it) a missing STOCKGUARD_TEST_REDIS_URL fails the test instead. Each test
// gets its own key namespace, whose keys are removed when it ends.

// go-redis logs its reconnection attempts; tests that kill servers on purpose
// would drown their own output in them.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// RequireReal reports whether the run must use real services (CI).
func RequireReal() bool { return os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" }

// TestRedis is one test's view of a Redis server: how to reach it and the
// namespace its keys live under.
type TestRedis struct {
	opt       *redis.Options
	Namespace string
}

// NewRedis returns the Redis of STOCKGUARD_TEST_REDIS_URL, else a private
// redis-server when one is on the PATH, else miniredis (outside CI). The test's
// keys are removed when it ends.
func NewRedis(tb testing.TB) *TestRedis {
	tb.Helper()
	r := &TestRedis{Namespace: "t" + RandomID()}
	switch url := os.Getenv("STOCKGUARD_TEST_REDIS_URL"); {
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			tb.Fatalf("STOCKGUARD_TEST_REDIS_URL: %v", err)
		}
		r.opt = opt
	case RequireReal():
		tb.Fatal("STOCKGUARD_TEST_REQUIRE_REAL=1 but STOCKGUARD_TEST_REDIS_URL is not set")
	default:
		if _, err := exec.LookPath("redis-server"); err == nil {
			r.opt = &redis.Options{Addr: Redis(tb).Addr}
		} else {
			r.opt = &redis.Options{Addr: startMiniredis(tb)}
		}
	}
	tb.Cleanup(func() { r.cleanup(tb) })
	return r
}

// NewRedisAt is NewRedis on a private server (Redis), which goes away with its
// keys when the test ends.
func NewRedisAt(_ testing.TB, addr string) *TestRedis {
	return &TestRedis{Namespace: "t" + RandomID(), opt: &redis.Options{Addr: addr}}
}

// URL returns a REDIS_URL for the server, for processes the test starts.
func (r *TestRedis) URL() string {
	return fmt.Sprintf("redis://%s/%d", r.opt.Addr, r.opt.DB)
}

// Options returns a copy of the options that reach the server, for a client
// the test configures itself.
func (r *TestRedis) Options() *redis.Options {
	opt := *r.opt
	return &opt
}

// Client returns a new client with its own connection pool, as a separate replica
// would have. It is closed when the test ends.
func (r *TestRedis) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt := *r.opt
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *TestRedis) cleanup(tb testing.TB) {
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

// RandomID returns 12 random hex characters, for names that must not collide
// with other tests or earlier runs on a shared server.
func RandomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// CommandCalls sums the calls in INFO commandstats, commands run by scripts
// included, so a benchmark can report Redis commands per operation.
func CommandCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
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

// startMiniredis runs a miniredis whose clock keeps real time (it moves only
// when told, and leases must expire for the tests of a dead holder), stopped
// when the test ends.
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

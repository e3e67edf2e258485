// Package testenv gives tests the real services they need: the Redis and the
// database named by STOCKGUARD_TEST_REDIS_URL and STOCKGUARD_TEST_DATABASE_URL, or
// embedded stand-ins when those are not set. With STOCKGUARD_TEST_REQUIRE_REAL=1 (CI
// sets it) a missing service fails the test instead of falling back or skipping.
package testenv

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

// go-redis logs its reconnection attempts; tests that kill servers on purpose
// would drown their own output in them.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// RequireReal reports whether the run must use real services (CI).
func RequireReal() bool { return os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" }

// Redis is one test's view of a Redis server: how to reach it and the namespace
// its keys live under, removed when the test ends.
type Redis struct {
	opt       *redis.Options
	Namespace string
}

// NewRedis returns the Redis of STOCKGUARD_TEST_REDIS_URL, else a private
// redis-server when one is on the PATH, else miniredis (outside CI).
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	r := &Redis{Namespace: "t" + RandomID()}
	switch url := os.Getenv("STOCKGUARD_TEST_REDIS_URL"); {
	case url != "":
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("STOCKGUARD_TEST_REDIS_URL: %v", err)
		}
		r.opt = opt
	case RequireReal():
		t.Fatal("STOCKGUARD_TEST_REQUIRE_REAL=1 but STOCKGUARD_TEST_REDIS_URL is not set")
	default:
		if _, err := exec.LookPath("redis-server"); err == nil {
			r.opt = &redis.Options{Addr: StartRedisServer(t).Addr}
		} else {
			r.opt = &redis.Options{Addr: miniredis.RunT(t).Addr()}
		}
	}
	t.Cleanup(func() { r.cleanup(t) })
	return r
}

// NewRedisAt is NewRedis on a private server (StartRedisServer), which goes away
// with its keys when the test ends.
func NewRedisAt(t testing.TB, addr string) *Redis {
	t.Helper()
	return &Redis{Namespace: "t" + RandomID(), opt: &redis.Options{Addr: addr}}
}

// URL returns a REDIS_URL for the server, for processes the test starts.
func (r *Redis) URL() string {
	return fmt.Sprintf("redis://%s/%d", r.opt.Addr, r.opt.DB)
}

// Client returns a new client with its own connection pool, as a separate replica
// would have. It is closed when the test ends.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	opt := *r.opt
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *Redis) cleanup(t testing.TB) {
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
			t.Logf("testenv: cleaning Redis: %v", err)
		}
	}
}

// RandomID returns 12 random hex characters, for names that must not collide with
// other tests or earlier runs on shared servers.
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

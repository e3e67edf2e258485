package lockserver

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedisForTest is StartRedis for a test: skipped when redis-server is
// not installed (outside CI), closed when the test ends.
func startRedisForTest(ctx context.Context, t *testing.T, opt RedisOptions) *Server {
	t.Helper()
	s, err := StartRedis(ctx, t.TempDir(), opt)
	if errors.Is(err, ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The Redis starter: the server answers and allows DEBUG with Debug, a paused
// one does not answer, and a restarted one answers again on the same port,
// empty.
func TestRedis(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startRedisForTest(ctx, t, RedisOptions{Debug: true})
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "DEBUG", "SLEEP", "0").Err(); err != nil {
		t.Fatalf("DEBUG with Debug: %v", err)
	}
	s.Pause()
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.Ping(pctx).Err()
	pcancel()
	s.Resume()
	if err == nil {
		t.Fatal("a paused redis-server answered")
	}
	addr := s.Addr
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || !s.Alive() {
		t.Fatalf("restarted on %s (alive %v), want %s", s.Addr, s.Alive(), addr)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after restart: EXISTS k = %d, %v; want an empty server", n, err)
	}
	s.Kill()
	if s.Alive() {
		t.Fatal("alive after Kill")
	}
}

// A redis-server that is not the process started (a port found free, then
// taken) fails the readiness check at once rather than passing it.
func TestRedisAnotherProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startRedisForTest(ctx, t, RedisOptions{})
	if err := redisIs(ctx, s.Addr, s.Pid()); err != nil {
		t.Fatalf("its own pid: %v", err)
	}
	if err := redisIs(ctx, s.Addr, s.Pid()+1); !errors.Is(err, errNotOwn) {
		t.Fatalf("another pid: %v, want errNotOwn", err)
	}
}

// StartService starts Redlock's three masters and names them in its URL; an
// unknown scheme is an error naming the known ones.
func TestServiceRedlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := StartService(ctx, "redlock", t.TempDir())
	if errors.Is(err, ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if len(s.Servers) != 3 {
		t.Fatalf("%d servers, want 3", len(s.Servers))
	}
	want := "redlock://" + s.Servers[0].Addr + "," + s.Servers[1].Addr + "," + s.Servers[2].Addr + "/0"
	if got := s.URL("0"); got != want {
		t.Fatalf("URL %q, want %q", got, want)
	}
	for _, srv := range s.Servers {
		if err := redisIs(ctx, srv.Addr, srv.Pid()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := StartService(ctx, "nope", t.TempDir()); err == nil || !strings.Contains(err.Error(), "redlock") {
		t.Fatalf("unknown scheme: %v, want an error naming the schemes", err)
	}
}

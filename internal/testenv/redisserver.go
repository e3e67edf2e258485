package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a private redis-server for tests that stop, stall, kill or
// restart it. It keeps nothing on disk and allows DEBUG (for DEBUG SLEEP).
type RedisServer struct {
	Addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// StartRedisServer starts a redis-server on a free loopback port and stops it when
// the test ends. Without redis-server on the PATH the test is skipped, or fails
// under STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if RequireReal() {
			t.Fatal("redis-server is not on the PATH")
		}
		t.Skip("redis-server is not on the PATH")
	}
	s := &RedisServer{port: freePort(t), dir: t.TempDir()}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.start(t)
	t.Cleanup(func() { s.Kill() })
	return s
}

func (s *RedisServer) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.CommandContext(context.Background(), "redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--enable-debug-command", "yes",
		"--logfile", "")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process that is starting up
	}
}

// Pause stops the server with SIGSTOP: connections stay open, nothing answers.
func (s *RedisServer) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *RedisServer) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Kill ends the server at once, losing every key.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts an empty one on the same port, as a Redis
// without persistence comes back after a crash.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.start(t)
}

// String names the server for test logs.
func (s *RedisServer) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

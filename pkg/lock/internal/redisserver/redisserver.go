// Package redisserver starts private redis-server processes for the tests of
// pkg/lock and its backends (pkg/ may not use the service's internal/testenv):
// servers a test may stop, stall, kill or restart.
package redisserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireReal reports whether the run must use real servers (CI).
func RequireReal() bool { return os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1" }

// Server is a private redis-server that keeps nothing on disk and allows DEBUG
// (for DEBUG SLEEP).
type Server struct {
	Addr string
	Port int
	Dir  string
	Args []string // more arguments, such as a cluster node's
	cmd  *exec.Cmd
}

// Need skips the test without redis-server on the PATH, or fails it under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func Need(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if RequireReal() {
			tb.Fatal("redis-server is not on the PATH")
		}
		tb.Skip("redis-server is not on the PATH")
	}
}

// New returns a server on a free loopback port and a directory of its own, not
// started; it is killed when the test ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{Dir: tb.TempDir()}
	s.SetPort(FreePort(tb))
	tb.Cleanup(s.Kill)
	return s
}

// SetPort moves a server not running to another port.
func (s *Server) SetPort(p int) { s.Port, s.Addr = p, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }

// Start starts a redis-server on a free loopback port and kills it when the
// test ends. A port found free may be taken by another process before the
// server binds it: it is started again on another, three times at most.
func Start(tb testing.TB) *Server {
	tb.Helper()
	Need(tb)
	s := New(tb)
	var err error
	for range 3 {
		if err = s.TryStart(); err == nil {
			return s
		}
		s.SetPort(FreePort(tb))
	}
	tb.Fatal(err)
	return nil
}

// TryStart starts the server and waits (at most 10s) until it answers as this
// process: a port found free may have been taken by another process meanwhile,
// and then the server exits or another answers on it.
func (s *Server) TryStart() error {
	s.cmd = exec.CommandContext(context.Background(), "redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.Dir, "--enable-debug-command", "yes", "--logfile", "")
	s.cmd.Args = append(s.cmd.Args, s.Args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer func() { _ = c.Close() }()
	pid := strconv.Itoa(s.cmd.Process.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			if !strings.Contains(info, "process_id:"+pid+"\r\n") {
				s.Kill()
				return fmt.Errorf("another server answers on %s", s.Addr)
			}
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on %s did not answer: %w", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond) // polling a process that is starting up
	}
}

// Pause stops the server with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server.
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Kill ends the server at once, losing every key.
func (s *Server) Kill() {
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
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	if err := s.TryStart(); err != nil {
		tb.Fatal(err)
	}
}

// FreePort returns a loopback port free when asked.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := (&net.ListenConfig{}).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

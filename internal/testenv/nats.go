package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// NATSEnv names the NATS server (JetStream enabled) that tests share, as a
// nats:// URL.
const NATSEnv = "STOCKGUARD_TEST_NATS_URL"

// NATSURL returns STOCKGUARD_TEST_NATS_URL. Unset, the test is skipped, or
// fails under STOCKGUARD_TEST_REQUIRE_REAL=1. Tests on it share the server:
// each uses a stream and subjects of its own (NATSNames) and deletes its
// stream at the end.
func NATSURL(t testing.TB) string {
	t.Helper()
	return serverURL(t, NATSEnv, "nats")
}

// NATSNames returns a stream name and a subject prefix of the test's own, on
// a shared server: STOCKGUARD_T<id> and t<id>.sku (the stream's subjects are
// prefix + ".>").
func NATSNames() (stream, prefix string) {
	id := RandomID()
	return "STOCKGUARD_T" + strings.ToUpper(id), "t" + id + ".sku"
}

// NATSServer is a private nats-server with JetStream, on a free loopback port
// with its store in the test's temporary directory, for a test that stops and
// restarts it: the store outlives Kill and Stop, so Start brings back the
// streams and their messages (and the duplicate windows' ids).
type NATSServer struct {
	// Addr is its host:port, URL its nats:// URL.
	Addr, URL string
	// Dir holds its store (jetstream/) and its log (server.log).
	Dir string

	t    testing.TB
	name string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartNATS starts a private nats-server -js and stops it when the test ends.
// Without nats-server on the PATH (Debian: apt-get install nats-server) the
// test is skipped, or fails under STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		if RequireReal() {
			t.Fatalf("nats-server is not on the PATH (Debian: apt-get install nats-server) and STOCKGUARD_TEST_REQUIRE_REAL=1")
		}
		t.Skip("nats-server is not on the PATH (Debian: apt-get install nats-server)")
	}
	s := &NATSServer{Dir: t.TempDir(), t: t, name: "stockguard-test-" + RandomID()}
	var err error
	// Another process may take the free port before nats-server binds it.
	for range 3 {
		port := lockservertest.FreePort(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.URL = "nats://" + s.Addr
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Start starts the server again on the same port and store, and fails the
// test when it does not answer within a minute.
func (s *NATSServer) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *NATSServer) start() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("nats-server on %s already runs", s.Addr)
	}
	logf, err := os.OpenFile(s.Dir+"/server.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The process outlives ctx: Kill and Stop end it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "nats-server", //nolint:gosec // fixed program, our arguments
		"-a", host, "-p", port, "-n", s.name, "-js", "-sd", s.Dir+"/jetstream")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start nats-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.Kill()
			return fmt.Errorf("nats-server on %s exited while starting (see %s/server.log): %w", s.Addr, s.Dir, err)
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("nats-server on %s did not answer: %w", s.Addr, err)
		case <-tick.C:
		}
	}
}

// ready reads the server's INFO: it must be this server (its name) with
// JetStream on.
func (s *NATSServer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	switch {
	case !strings.HasPrefix(line, "INFO "):
		return fmt.Errorf("not NATS: %q", line)
	case !strings.Contains(line, `"server_name":"`+s.name+`"`):
		return errors.New("another NATS server answers on the port")
	case !strings.Contains(line, `"jetstream":true`):
		return errors.New("JetStream is not enabled yet")
	}
	return nil
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for it;
// killing a server that does not run does nothing.
func (s *NATSServer) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops the server as an operator would (SIGTERM: it closes its clients'
// connections and flushes its store) and waits for it.
func (s *NATSServer) Stop() { s.stop(syscall.SIGTERM) }

func (s *NATSServer) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

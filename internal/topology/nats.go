package topology

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NATSServer is a private nats-server with JetStream on a free loopback port,
// its store and log in a folder of the caller's, for a run that takes NATS down
// and brings it back: the store outlives Stop and Kill, so Start brings back
// the streams, their messages and the duplicate windows' ids. The benchmark
// and the tests (internal/testenv) start theirs with it.
type NATSServer struct {
	// Addr is its host:port, URL its nats:// URL.
	Addr, URL string
	// Dir holds its store (jetstream/) and its log (server.log).
	Dir string

	name string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// natsStartWait bounds how long a nats-server may take to answer.
const natsStartWait = time.Minute

// ErrNoNATS says nats-server is not on the PATH.
var ErrNoNATS = errors.New("nats-server is not on the PATH (Debian: apt-get install nats-server)")

// StartNATS starts a private nats-server -js named name, its store and log in
// dir, and waits until it answers as itself with JetStream on. The caller
// stops it (Stop or Kill).
func StartNATS(ctx context.Context, dir, name string) (*NATSServer, error) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		return nil, ErrNoNATS
	}
	s := &NATSServer{Dir: dir, name: name}
	var err error
	// Another process may take the free port before nats-server binds it.
	for range 3 {
		var lc net.ListenConfig
		l, lerr := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if lerr != nil {
			return nil, fmt.Errorf("free port: %w", lerr)
		}
		s.Addr = l.Addr().String()
		_ = l.Close()
		s.URL = "nats://" + s.Addr
		if err = s.Start(ctx); err == nil {
			return s, nil
		}
	}
	return nil, err
}

// Start starts the server again on its port and store, and waits until it
// answers as itself with JetStream on (a minute at most).
func (s *NATSServer) Start(ctx context.Context) error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return fmt.Errorf("nats-server on %s already runs", s.Addr)
	}
	logf, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.Addr)
	// The process outlives ctx: Stop and Kill end it.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "nats-server", //nolint:gosec // fixed program, our arguments
		"-a", host, "-p", port, "-n", s.name, "-js", "-sd", filepath.Join(s.Dir, "jetstream"))
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
	ctx, cancel := context.WithTimeout(ctx, natsStartWait)
	defer cancel()
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
			return fmt.Errorf("nats-server on %s exited while starting: %w\n%s", s.Addr, err, s.LogTail(5))
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
	switch {
	case err != nil:
		return err
	case !strings.HasPrefix(line, "INFO "):
		return fmt.Errorf("not NATS: %q", line)
	case !strings.Contains(line, `"server_name":"`+s.name+`"`):
		return errors.New("another NATS server answers on the port")
	case !strings.Contains(line, `"jetstream":true`):
		return errors.New("JetStream is not enabled yet")
	}
	return nil
}

// Pid is the running server's process id, 0 when it is stopped.
func (s *NATSServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill ends the server at once (SIGKILL), as a crash would, and waits for it;
// killing a server that does not run does nothing.
func (s *NATSServer) Kill() { s.stop(syscall.SIGKILL) }

// Stop stops the server as an operator would (SIGTERM: it closes its clients'
// connections and flushes its store) and waits for it, 30s at most before
// SIGKILL.
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

// LogTail is the last n lines of the server's log, for an error.
func (s *NATSServer) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Package lockserver starts private servers (Redis, etcd, ZooKeeper, Azurite)
// on free loopback ports, each in a directory of its own, for the tests, demos
// and benchmarks that pause, kill or restart them: the lock module's one set of
// launchers, which the service's test environment and commands use too. A
// Server is one process; its data directory outlives Kill, so Restart brings
// the same server back with what it had persisted.
//
// Each kind has its starter in a file of its own (redis.go, etcd.go,
// zookeeper.go, azurite.go), StartService starts those a lock URL's scheme
// needs (service.go); this file is the process they share.
package lockserver

import (
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
	"time"
)

// ErrNotInstalled is returned by a starter whose server is not on this machine.
var ErrNotInstalled = errors.New("lockserver: server not installed")

// Server is one private server process.
type Server struct {
	// Addr is the host:port clients dial.
	Addr string
	// Dir is the server's own directory: its data and its log (server.log).
	Dir string

	name  string
	argv  []string
	env   []string
	ready func(ctx context.Context, pid int) error

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// process describes a server to start: its argv, extra environment, and how to
// tell it answers. ready is given the process's pid, for a server that can say
// whether it is that process: an error wrapping errNotOwn (another process
// answers on the port) ends the start at once.
type process struct {
	name  string
	argv  []string
	env   []string
	dir   string
	addr  string
	ready func(ctx context.Context, pid int) error
}

// errNotOwn is what a ready check wraps when another process than the one
// started answers on its port: a port found free was taken meanwhile.
var errNotOwn = errors.New("another process answers on the port")

// start runs p and waits, within ctx, until p.ready succeeds.
func start(ctx context.Context, p process) (*Server, error) {
	s := &Server{Addr: p.addr, Dir: p.dir, name: p.name, argv: p.argv, env: p.env, ready: p.ready}
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) run(ctx context.Context) error {
	logf, err := os.OpenFile(s.Dir+"/server.log", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// The process outlives ctx: it is the caller's to stop.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), s.argv[0], s.argv[1:]...) //nolint:gosec // argv is built by this package
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("lockserver: start %s: %w", s.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitReady(ctx, cmd.Process.Pid, exited); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// waitReady polls ready until it succeeds, the process exits, another answers
// on its port or ctx ends.
func (s *Server) waitReady(ctx context.Context, pid int, exited <-chan struct{}) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		last = s.ready(actx, pid)
		cancel()
		if last == nil {
			return nil
		}
		if errors.Is(last, errNotOwn) {
			return fmt.Errorf("lockserver: %s on %s: %w", s.name, s.Addr, last)
		}
		select {
		case <-exited:
			return fmt.Errorf("lockserver: %s exited while starting (see %s/server.log): %w", s.name, s.Dir, last)
		case <-ctx.Done():
			return fmt.Errorf("lockserver: %s on %s did not answer: %w", s.name, s.Addr, last)
		case <-tick.C:
		}
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Pid is the server's process id, 0 when it is not running: for a benchmark
// that reads its CPU time from /proc.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Alive reports whether the process runs: started, neither killed nor exited.
func (s *Server) Alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Pause stops the process with SIGSTOP: its connections stay open, nothing
// answers on them. It returns once every thread of the process is stopped:
// SIGSTOP lands
// asynchronously, and a JVM thread still running just after kill(2) answered
// a request in CI, on a busy machine.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
	if pid := s.Pid(); pid != 0 {
		waitStopped(pid, 5*time.Second)
	}
}

// waitStopped waits, up to bound, until every thread of pid is in the stopped
// state ('T' or 't' in /proc/<pid>/task/<tid>/stat). Without /proc (not Linux)
// or once the process is gone it returns at once.
func waitStopped(pid int, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if allStopped(pid) {
			return
		}
		time.Sleep(time.Millisecond) // polling the kernel's state: nothing to wait on
	}
}

// allStopped reports whether every thread of pid is stopped, or pid's threads
// cannot be read (no /proc, or the process is gone).
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		// The state follows the command name, which is in parentheses and may
		// hold spaces: "tid (comm) S ...".
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			return false
		}
	}
	return true
}

// Resume continues a paused process.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Kill ends the process at once (SIGKILL) and waits for it; the directory is
// kept. Killing a server not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Kill()
	<-exited
}

// Restart kills the server if it runs and starts it again on the same port and
// directory, waiting within ctx until it answers.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.run(ctx)
}

// Close kills the server and removes its directory.
func (s *Server) Close() error {
	s.Kill()
	return os.RemoveAll(s.Dir)
}

// FreePort returns a loopback TCP port nothing listens on now. Another process
// may take it before the server does; starters then fail and may be retried.
func FreePort() (int, error) { return FreePortOn("127.0.0.1") }

// FreePortOn is FreePort on host (an address of this machine).
func FreePortOn(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0")) //nolint:noctx // a port probe, closed at once
	if err != nil {
		return 0, fmt.Errorf("lockserver: free port on %s: %w", host, err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loopback is 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// newDir makes the server's directory: under parent when it is not empty (a
// test's TempDir), else a new temporary directory.
func newDir(parent, kind string) (string, error) {
	if parent != "" {
		return os.MkdirTemp(parent, kind+"-")
	}
	return os.MkdirTemp("", "stockguard-"+kind+"-")
}

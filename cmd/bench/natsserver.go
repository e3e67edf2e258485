package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// natsServer is a private nats-server with JetStream that the bench starts on
// a free loopback port, with its store in a temporary folder of its own, so
// that it can stop it (the catch-up run takes NATS down for a while) and start
// it again on the same port and store. close stops it and deletes the folder.
type natsServer struct {
	addr, url, dir, name string
	cmd                  *exec.Cmd
	exited               chan struct{}
}

// natsStartWait bounds how long a nats-server may take to answer.
const natsStartWait = 30 * time.Second

// startNATS starts a private nats-server -js; without nats-server on the PATH
// it says so (Debian: the nats-server package).
func startNATS(ctx context.Context) (*natsServer, error) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		return nil, errors.New("nats-server is not on the PATH (Debian: apt-get install nats-server)")
	}
	dir, err := os.MkdirTemp("", "stockguard-bench-nats-")
	if err != nil {
		return nil, err
	}
	s := &natsServer{dir: dir, name: "stockguard-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	// Another process may take the free port before nats-server binds it.
	for range 3 {
		if s.addr, err = freeLoopbackAddr(ctx); err != nil {
			break
		}
		s.url = "nats://" + s.addr
		if err = s.start(ctx); err == nil {
			return s, nil
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// start starts the server on its port and store, and waits until it answers
// as itself with JetStream on.
func (s *natsServer) start(ctx context.Context) error {
	if s.cmd != nil {
		return fmt.Errorf("nats-server on %s already runs", s.addr)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(s.addr)
	// Not ended with ctx: stop and close end it, and the bench always calls close.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), "nats-server", "-a", host, "-p", port, "-n", s.name, "-js", "-sd", filepath.Join(s.dir, "jetstream")) //nolint:gosec // fixed program, our arguments
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start nats-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
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
			s.stop(syscall.SIGKILL)
			return fmt.Errorf("nats-server on %s exited while starting: %w\n%s", s.addr, err, s.logTail())
		case <-ctx.Done():
			s.stop(syscall.SIGKILL)
			return fmt.Errorf("nats-server on %s did not answer: %w", s.addr, err)
		case <-tick.C:
		}
	}
}

// ready reads the server's INFO: this server (its name), JetStream on.
func (s *natsServer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.addr)
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

// pid is the running server's process id, 0 when it is stopped.
func (s *natsServer) pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// stop ends the server with sig (SIGTERM: as an operator stops it, its
// clients' connections closed and its store flushed) and waits for it, 30s at
// most before SIGKILL; stopping a stopped server does nothing.
func (s *natsServer) stop(sig syscall.Signal) {
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
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

// close stops the server and deletes its store.
func (s *natsServer) close() {
	s.stop(syscall.SIGTERM)
	_ = os.RemoveAll(s.dir)
}

// logTail is the end of the server's log, for an error.
func (s *natsServer) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	return lastLines(b, 5)
}

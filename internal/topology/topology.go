// Package topology runs stockguard the way it is deployed, from processes: the
// binaries built from this module, replica processes of "stockguard serve", a
// health-checking round-robin balancer (balancer.go) in front of them, and the clean-up of a
// run's Redis keys. The demo and the strategy benchmark share it.
package topology

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binaries are the paths of the built stockguard and loadtest binaries.
type Binaries struct{ Stockguard, Loadtest string }

// Build compiles both binaries into dir: the replicas must be separate OS processes, so
// that nothing in memory can be shared between them.
func Build(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{Stockguard: filepath.Join(dir, "stockguard"), Loadtest: filepath.Join(dir, "loadtest")}
	root, err := ModuleRoot()
	if err != nil {
		return b, err
	}
	for out, pkg := range map[string]string{b.Stockguard: "./cmd/stockguard", b.Loadtest: "./loadtest"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w\n%s", pkg, err, msg)
		}
	}
	return b, nil
}

// ModuleRoot is the nearest folder up from the working one with a go.mod: the
// demo and the benchmark run from the repository, by make or go run.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above this folder: run this from the stockguard repository")
		}
		dir = parent
	}
}

// StartReplica runs "stockguard serve" in its own process group and returns its
// base URL once it listens.
func StartReplica(ctx context.Context, bin string, env []string) (*exec.Cmd, string, error) {
	cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, "serve")
	cmd.Env = env
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		StopAll([]*exec.Cmd{cmd})
		return nil, "", errors.New("the replica exited before listening")
	}
	addr, ok := ListenAddr(lines.Text())
	if !ok {
		StopAll([]*exec.Cmd{cmd})
		return nil, "", fmt.Errorf("unexpected first line %q", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return cmd, "http://" + addr, nil
}

// StopAll stops replicas gracefully, and kills what does not stop in time.
func StopAll(procs []*exec.Cmd) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
				<-done
			}
		})
	}
	wg.Wait()
}

// DropNamespace deletes a run's keys ({<ns>:...}) once its replicas stopped.
func DropNamespace(ctx context.Context, redisURL, ns string, log *slog.Logger) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return
	}
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second) // also after Ctrl-C
	defer cancel()
	iter := rdb.Scan(ctx, 0, "{"+ns+":*", 500).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		log.Warn("could not remove a run's Redis keys", "namespace", ns, "err", err)
	}
}

// ListenAddr reads the address from the first line "stockguard serve" writes on
// stdout: "listening on ADDR" with --log-format text, a JSON log record with
// msg "listening" and addr ADDR with --log-format json.
func ListenAddr(line string) (string, bool) {
	if addr, ok := strings.CutPrefix(line, "listening on "); ok {
		return addr, true
	}
	var rec struct{ Msg, Addr string }
	if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "listening" || rec.Addr == "" {
		return "", false
	}
	return rec.Addr, true
}

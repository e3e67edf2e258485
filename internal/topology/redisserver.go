package topology

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
)

// StartRedisServer runs the redis-server at path on a free loopback port,
// keeping nothing on disk, and returns its address once it answers, and how to
// stop it (the process outlives ctx until then).
func StartRedisServer(ctx context.Context, path string) (string, func(), error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "stockguard-redis-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(context.WithoutCancel(ctx), path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := WaitRedis(ctx, addr); err != nil {
		stop()
		return "", nil, err
	}
	return addr, stop, nil
}

// StartRedisServers starts n redis-servers (StartRedisServer): Redlock's
// independent masters. On an error none is left running.
func StartRedisServers(ctx context.Context, path string, n int) ([]string, func(), error) {
	var addrs []string
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for range n {
		addr, stop, err := StartRedisServer(ctx, path)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		addrs, stops = append(addrs, addr), append(stops, stop)
	}
	return addrs, stopAll, nil
}

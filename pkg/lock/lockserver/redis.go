package lockserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions says what kind of redis-server StartRedis starts. The zero value
// is a plain server.
type RedisOptions struct {
	// Debug allows the DEBUG command (enable-debug-command yes), for tests
	// that stall the server with DEBUG SLEEP.
	Debug bool
	// Sentinel runs it as a sentinel (redis-server --sentinel); Conf then names
	// the masters it monitors.
	Sentinel bool
	// ClusterNodeTimeout, above 0, makes it a Redis Cluster node with that
	// cluster-node-timeout, its nodes.conf in its directory and its cluster bus
	// on a free port of its own (cluster-port), not port+10000, which may be
	// taken or past 65535.
	ClusterNodeTimeout time.Duration
	// Conf is more lines of its redis.conf, such as "replicaof 127.0.0.1 6379".
	Conf []string
}

// redisBinary finds redis-server on the PATH; it fails with ErrNotInstalled
// when there is none.
func redisBinary() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("%w: redis-server: %w", ErrNotInstalled, err)
	}
	return bin, nil
}

// StartRedis starts a private redis-server (from the PATH) on a free loopback
// port, as opt says, with its redis.conf, its working directory and its log in
// a new directory under parent (see newDir), and waits within ctx until it
// answers INFO as this process: a port found free may have been taken by
// another process meanwhile, and then it fails at once (the caller may try
// again). It keeps nothing on disk (no RDB, no AOF), so Restart brings back an
// empty server on the same port, as a Redis without persistence comes back
// after a crash. It fails with ErrNotInstalled when no redis-server is on the
// PATH.
func StartRedis(ctx context.Context, parent string, opt RedisOptions) (*Server, error) {
	bin, err := redisBinary()
	if err != nil {
		return nil, err
	}
	nports := 1
	if opt.ClusterNodeTimeout > 0 {
		nports = 2
	}
	ports, err := freePorts(nports)
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "redis")
	if err != nil {
		return nil, err
	}
	conf := []string{
		"port " + strconv.Itoa(ports[0]), "bind 127.0.0.1", "dir " + dir,
		`logfile ""`, // standard output: the server's log
		`save ""`, "appendonly no",
	}
	if opt.Debug {
		conf = append(conf, "enable-debug-command yes")
	}
	if opt.ClusterNodeTimeout > 0 {
		conf = append(conf, "cluster-enabled yes", "cluster-config-file nodes.conf",
			"cluster-node-timeout "+strconv.FormatInt(opt.ClusterNodeTimeout.Milliseconds(), 10),
			"cluster-port "+strconv.Itoa(ports[1]))
	}
	conf = append(conf, opt.Conf...)
	// A file, not arguments: a sentinel needs one it can rewrite.
	path := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	argv := []string{bin, path}
	name := "redis-server"
	if opt.Sentinel {
		argv, name = append(argv, "--sentinel"), "redis sentinel"
	}
	addr := loopback(ports[0])
	s, err := start(ctx, process{
		name: name, argv: argv, dir: dir, addr: addr,
		ready: func(ctx context.Context, pid int) error { return redisIs(ctx, addr, pid) },
	})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// redisIs asks the server on addr its process id (INFO server): nil when it is
// pid, an error wrapping errNotOwn when another process answers.
func redisIs(ctx context.Context, addr string, pid int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer func() { _ = c.Close() }()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("%w: redis pid %s, not %d", errNotOwn, v, pid)
			}
			return nil
		}
	}
	return fmt.Errorf("redis INFO server names no process_id: %q", info)
}

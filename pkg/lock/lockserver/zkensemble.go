package lockserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// StartZooKeeperEnsemble starts a private three-member ZooKeeper ensemble on
// free loopback ports (a client, a quorum and an election port per member),
// each member's data and myid in a directory of its own under a new directory
// under parent, with ZooKeeperTick as StartZooKeeper's server, and waits within
// ctx until every member serves clients as the leader or a follower (its
// "srvr" answer names that mode). Every four-letter word is allowed
// (4lw.commands.whitelist=*): Leader asks "srvr". It fails with
// ErrNotInstalled without java or ZooKeeper's jars.
func StartZooKeeperEnsemble(ctx context.Context, parent string) (*Ensemble, error) {
	java, cp, err := ZooKeeperClasspath()
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "zookeeper-ensemble")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3 * EnsembleSize)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	var servers []string
	for i := range EnsembleSize {
		// server.<myid>=host:quorumPort:electionPort; myids start at 1.
		servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
	}
	procs := make([]process, EnsembleSize)
	addrs := make([]string, EnsembleSize)
	for i := range EnsembleSize {
		mdir := filepath.Join(dir, fmt.Sprintf("m%d", i))
		data := filepath.Join(mdir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		cfg := strings.Join(append([]string{
			"tickTime=" + strconv.FormatInt(ZooKeeperTick.Milliseconds(), 10),
			// A follower has 25 ticks (5s) to connect and sync to a new leader,
			// 10 (2s) to answer it afterwards: enough for a JVM on a loaded
			// machine, short enough that a stopped member is dropped at once.
			"initLimit=25",
			"syncLimit=10",
			"dataDir=" + data,
			fmt.Sprintf("clientPort=%d", ports[3*i]),
			"clientPortAddress=127.0.0.1",
			"maxClientCnxns=0",
			"admin.enableServer=false",
			"4lw.commands.whitelist=*",
			"fsync.warningthresholdms=10000",
			// A member's election connections to one that is down fail at once
			// on loopback; the default 5s bound on them only matters elsewhere.
			"cnxTimeout=1000",
		}, servers...), "\n") + "\n"
		if err := os.WriteFile(filepath.Join(mdir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		addrs[i] = loopback(ports[3*i])
		addr := addrs[i]
		procs[i] = process{
			name: fmt.Sprintf("zookeeper m%d", i),
			argv: []string{java, "-Xmx256m", "-XX:+UseSerialGC", "-Xshare:auto", "-Dzookeeper.jmx.log4j.disable=true",
				"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(mdir, "zoo.cfg")},
			dir:  mdir,
			addr: addr,
			ready: func(ctx context.Context, _ int) error {
				_, err := zkMode(ctx, addr)
				return err
			},
		}
	}
	e := &Ensemble{Dir: dir, kind: "zookeeper"}
	e.isLeader = func(ctx context.Context, i int) (bool, error) {
		mode, err := zkMode(ctx, addrs[i])
		return mode == "leader", err
	}
	if err := startMembers(ctx, e, procs); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return e, nil
}

// zkMode asks a member "srvr" and returns its mode when it serves clients as
// a member of a quorum: "leader" or "follower" (an observer or a standalone
// server is an error here, as is a member still electing, which answers that
// it is not serving).
func zkMode(ctx context.Context, addr string) (string, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 4096))
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if mode, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode: "); ok {
			if mode == "leader" || mode == "follower" {
				return mode, nil
			}
			return "", fmt.Errorf("zookeeper member in mode %q", mode)
		}
	}
	return "", fmt.Errorf("zookeeper member not serving: %q", strings.TrimSpace(string(b)))
}

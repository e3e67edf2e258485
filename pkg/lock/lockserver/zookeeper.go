package lockserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ZooKeeperTick is the tickTime of StartZooKeeper's server. The server grants
// sessions between 2 and 20 ticks (400ms to 4s), so that tests can let a
// session expire within a second or two.
const ZooKeeperTick = 200 * time.Millisecond

// ZooKeeperClasspath finds the Java classpath of a ZooKeeper server and the
// java command: $ZOOKEEPER_CLASSPATH when set, else $ZOOKEEPER_HOME/lib/* (an
// Apache release unpacked), else the zookeeper.jar that a distribution's
// package puts in share/java beside the java command's bin directory (its
// manifest names the jars it needs). It fails with ErrNotInstalled when java or
// the jar is missing.
func ZooKeeperClasspath() (java, classpath string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		return "", "", fmt.Errorf("%w: ZooKeeper needs java on the PATH", ErrNotInstalled)
	}
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return java, cp, nil
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		return java, filepath.Join(home, "lib", "*"), nil
	}
	// java is usually a chain of links (alternatives); the package's jar sits
	// under the prefix of the first one, not of the JDK it resolves to.
	jar := filepath.Join(filepath.Dir(filepath.Dir(java)), "share", "java", "zookeeper.jar")
	if _, err := os.Stat(jar); err != nil {
		return "", "", fmt.Errorf("%w: no zookeeper.jar beside java's prefix; set ZOOKEEPER_HOME or ZOOKEEPER_CLASSPATH", ErrNotInstalled)
	}
	return java, jar, nil
}

// StartZooKeeper starts a standalone ZooKeeper server on a free loopback port,
// in a new directory under parent (a temporary one when parent is empty), and
// waits within ctx until it serves clients (its "srvr" answer names its
// mode; "ruok" would answer before the database is loaded). The JVM is started directly, not
// through a script, so that Pause and Kill reach the server itself. Its data
// (snapshots and transaction log) lives in Dir/data and survives Kill and
// Restart. It fails with ErrNotInstalled without java or ZooKeeper's jars.
func StartZooKeeper(ctx context.Context, parent string) (*Server, error) {
	java, cp, err := ZooKeeperClasspath()
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "zookeeper")
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	cfg := strings.Join([]string{
		"tickTime=" + fmt.Sprint(ZooKeeperTick.Milliseconds()),
		"dataDir=" + filepath.Join(dir, "data"),
		fmt.Sprintf("clientPort=%d", port),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr",
		// Every write is fsynced before it is acknowledged (the default); a
		// private server on a busy machine need not warn about slow ones.
		"fsync.warningthresholdms=10000",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	addr := loopback(port)
	s, err := start(ctx, process{
		name: "zookeeper",
		argv: []string{java, "-Xmx256m", "-XX:+UseSerialGC", "-Xshare:auto", "-Dzookeeper.jmx.log4j.disable=true",
			"-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg")},
		dir:   dir,
		addr:  addr,
		ready: func(ctx context.Context, _ int) error { return serving(ctx, addr) },
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// serving asks a ZooKeeper server the four-letter word "srvr"; it names its
// mode only once it serves clients.
func serving(ctx context.Context, addr string) error {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if _, err := c.Write([]byte("srvr")); err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(c, 4096))
	if err != nil {
		return err
	}
	if !strings.Contains(string(b), "Mode: ") {
		return fmt.Errorf("zookeeper is not serving yet: %q", strings.TrimSpace(string(b)))
	}
	return nil
}

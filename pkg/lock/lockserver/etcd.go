package lockserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

// StartEtcd starts a private single-member etcd on two free loopback ports (client
// and peer), with its data in a new directory under parent (see newDir), and
// waits within ctx until it serves: its /health answers true, which needs a
// leader. It fails with ErrNotInstalled when no etcd binary is on the PATH.
// Restart brings the member back on the same ports and data, so what it had
// committed (keys, leases, the revision) survives.
func StartEtcd(ctx context.Context, parent string) (*Server, error) {
	return startEtcdTries(ctx, parent)
}

// StartEtcdV2 is StartEtcd with etcd's v2 API served too (--enable-v2, which
// etcd 3.4 and 3.5 take): Patroni 3.0's etcd3 client keeps a watch cache that
// a starved machine can leave stale, its leader then failing every
// compare-and-set of the /sync key, while its v2 client reads every time.
func StartEtcdV2(ctx context.Context, parent string) (*Server, error) {
	return startEtcdTries(ctx, parent, "--enable-v2=true")
}

// etcdBinary finds etcd on the PATH; it fails with ErrNotInstalled, saying
// where a distribution packages it, when there is none.
func etcdBinary() (string, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return "", fmt.Errorf("%w: etcd is not on the PATH (Debian: apt-get install etcd-server): %w", ErrNotInstalled, err)
	}
	return bin, nil
}

func startEtcdTries(ctx context.Context, parent string, extra ...string) (*Server, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	var last error
	// Another process may take a free port before etcd binds it: a few tries.
	for range 3 {
		s, err := startEtcd(ctx, bin, parent, extra)
		if err == nil {
			return s, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func startEtcd(ctx context.Context, bin, parent string, extra []string) (*Server, error) {
	client, err := FreePort()
	if err != nil {
		return nil, err
	}
	peer, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "etcd")
	if err != nil {
		return nil, err
	}
	clientURL, peerURL := "http://"+loopback(client), "http://"+loopback(peer)
	argv := []string{
		bin,
		"--name", "n1",
		"--data-dir", dir + "/data",
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "n1=" + peerURL,
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "error",
	}
	argv = append(argv, extra...)
	health := clientURL + "/health"
	s, err := start(ctx, process{
		name: "etcd", argv: argv, dir: dir, addr: loopback(client),
		ready: func(ctx context.Context, _ int) error { return etcdHealthy(ctx, health) },
	})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// etcdHealthy asks etcd's /health, which is true once the member has a leader
// and serves reads.
func etcdHealthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("etcd not healthy: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

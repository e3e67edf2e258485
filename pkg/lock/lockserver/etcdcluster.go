package lockserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// StartEtcdCluster starts a private three-member etcd cluster on free loopback
// ports (a client and a peer port per member), each member's data in a
// directory of its own under a new directory under parent (see newDir), and
// waits within ctx until every member serves: its /health answers true, which
// needs a leader and a quorum. Leader finds the leader by asking each member
// its status (the leader is the member whose status names itself). Restart
// brings a member back on the same ports and data. It fails with
// ErrNotInstalled when no etcd binary is on the PATH.
func StartEtcdCluster(ctx context.Context, parent string) (*Ensemble, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	dir, err := newDir(parent, "etcd-cluster")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * EnsembleSize)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	token := make([]byte, 8)
	_, _ = rand.Read(token)
	names := make([]string, EnsembleSize)
	clientURLs := make([]string, EnsembleSize)
	peerURLs := make([]string, EnsembleSize)
	initial := make([]string, EnsembleSize)
	for i := range EnsembleSize {
		names[i] = fmt.Sprintf("m%d", i)
		clientURLs[i] = "http://" + loopback(ports[2*i])
		peerURLs[i] = "http://" + loopback(ports[2*i+1])
		initial[i] = names[i] + "=" + peerURLs[i]
	}
	procs := make([]process, EnsembleSize)
	for i := range EnsembleSize {
		mdir := filepath.Join(dir, names[i])
		if err := os.Mkdir(mdir, 0o755); err != nil {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		health := clientURLs[i] + "/health"
		procs[i] = process{
			name: "etcd " + names[i],
			argv: []string{
				bin,
				"--name", names[i],
				"--data-dir", filepath.Join(mdir, "data"),
				"--listen-client-urls", clientURLs[i],
				"--advertise-client-urls", clientURLs[i],
				"--listen-peer-urls", peerURLs[i],
				"--initial-advertise-peer-urls", peerURLs[i],
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-token", "stockguard-" + hex.EncodeToString(token),
				"--initial-cluster-state", "new",
				"--logger", "zap",
				"--log-outputs", "stderr",
				"--log-level", "warn",
			},
			dir:   mdir,
			addr:  loopback(ports[2*i]),
			ready: func(ctx context.Context, _ int) error { return etcdHealthy(ctx, health) },
		}
	}
	e := &Ensemble{Dir: dir, kind: "etcd"}
	e.isLeader = func(ctx context.Context, i int) (bool, error) { return etcdIsLeader(ctx, clientURLs[i]) }
	if err := startMembers(ctx, e, procs); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return e, nil
}

// etcdIsLeader asks a member its status through etcd's JSON gateway
// (Maintenance.Status): it leads when the leader it names is itself. A member
// that knows no leader (leader 0) is an error: it serves nothing.
func etcdIsLeader(ctx context.Context, clientURL string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, clientURL+"/v3/maintenance/status", strings.NewReader("{}"))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("status: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	// uint64s come as decimal strings from the gateway.
	var st struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader string `json:"leader"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return false, fmt.Errorf("status: %w", err)
	}
	if st.Leader == "" || st.Leader == "0" || st.Header.MemberID == "" {
		return false, fmt.Errorf("status: no leader known: %s", strings.TrimSpace(string(body)))
	}
	return st.Leader == st.Header.MemberID, nil
}

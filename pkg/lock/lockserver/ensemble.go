package lockserver

// Three-member ensembles (etcd, ZooKeeper): what they share.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// EnsembleSize is the number of members StartEtcdCluster and
// StartZooKeeperEnsemble start: the smallest ensemble that survives the loss
// of one member and loses its quorum with two.
const EnsembleSize = 3

// Ensemble is a private cluster of EnsembleSize server processes of one kind
// on free loopback ports, each member a Server with a directory of its own
// (its data and its server.log) under Dir. Members are numbered 0..2.
type Ensemble struct {
	// Members are the member processes: Addr is each one's client address.
	Members []*Server
	// Dir holds the members' directories.
	Dir string

	kind string
	// isLeader asks member i whether it leads: leader is its answer; err when
	// it does not answer, or answers that it serves no clients.
	isLeader func(ctx context.Context, i int) (leader bool, err error)
}

// Addrs are the members' client addresses (host:port), in member order.
func (e *Ensemble) Addrs() []string {
	out := make([]string, len(e.Members))
	for i, m := range e.Members {
		out[i] = m.Addr
	}
	return out
}

// HostList is the members' client addresses joined by commas, as the
// backends' URLs take them (etcd://h1:p1,h2:p2,h3:p3/..., zk://...).
func (e *Ensemble) HostList() string { return strings.Join(e.Addrs(), ",") }

// Leader asks every member (each within ctx and a second) and returns the
// index of the one that says it leads, when a majority answers and exactly
// one of them leads: a member that is stopped, killed or still electing does
// not count.
func (e *Ensemble) Leader(ctx context.Context) (int, error) {
	type answer struct {
		leader bool
		err    error
	}
	answers := make([]answer, len(e.Members))
	var wg sync.WaitGroup
	for i := range e.Members {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			answers[i].leader, answers[i].err = e.isLeader(actx, i)
		})
	}
	wg.Wait()
	leader, serving := -1, 0
	var errs []error
	for i, a := range answers {
		switch {
		case a.err != nil:
			errs = append(errs, fmt.Errorf("member %d: %w", i, a.err))
		case a.leader && leader >= 0:
			return -1, fmt.Errorf("lockserver: %s members %d and %d both say they lead", e.kind, leader, i)
		case a.leader:
			leader = i
			serving++
		default:
			serving++
		}
	}
	if leader < 0 || serving <= len(e.Members)/2 {
		return -1, fmt.Errorf("lockserver: %s has no leader with a quorum (%d of %d serving): %w", e.kind, serving, len(e.Members), errors.Join(errs...))
	}
	return leader, nil
}

// WaitLeader polls Leader (every 50ms) until it names a leader or ctx ends.
func (e *Ensemble) WaitLeader(ctx context.Context) (int, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		i, err := e.Leader(ctx)
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Kill ends member i at once (SIGKILL); its directory stays for Restart.
func (e *Ensemble) Kill(i int) { e.Members[i].Kill() }

// Stop stops member i (SIGSTOP): its connections stay open, nothing answers.
func (e *Ensemble) Stop(i int) { e.Members[i].Pause() }

// Cont continues a stopped member i (SIGCONT).
func (e *Ensemble) Cont(i int) { e.Members[i].Resume() }

// Restart kills member i if it runs and starts it again on its ports and data,
// waiting within ctx until it serves as a member of a quorum: restarting a
// member while a majority is down returns only when enough of the others are
// back (restart them concurrently).
func (e *Ensemble) Restart(ctx context.Context, i int) error {
	if err := e.Members[i].Restart(ctx); err != nil {
		return fmt.Errorf("lockserver: %s member %d: %w", e.kind, i, err)
	}
	return nil
}

// Close kills every member and removes the ensemble's directory.
func (e *Ensemble) Close() error {
	for _, m := range e.Members {
		m.Kill()
	}
	return os.RemoveAll(e.Dir)
}

// LogTails is the last n bytes of every member's server.log, headed by the
// member's index and address: for a failed test to print.
func (e *Ensemble) LogTails(n int) string {
	var b strings.Builder
	for i, m := range e.Members {
		data, err := os.ReadFile(filepath.Join(m.Dir, "server.log"))
		if err != nil {
			fmt.Fprintf(&b, "--- %s member %d (%s): %v\n", e.kind, i, m.Addr, err)
			continue
		}
		if len(data) > n {
			data = append([]byte("..."), data[len(data)-n:]...)
		}
		fmt.Fprintf(&b, "--- %s member %d (%s), %s:\n%s\n", e.kind, i, m.Addr, filepath.Join(m.Dir, "server.log"), data)
	}
	return b.String()
}

// startMembers starts the members' processes at once (none serves before a
// quorum has started) and waits, within ctx, until each serves. On failure it
// kills those started and returns the error with the logs' tails.
func startMembers(ctx context.Context, e *Ensemble, procs []process) error {
	servers := make([]*Server, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { servers[i], errs[i] = start(ctx, p) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// A member that did not start leaves no Server: its log is still in its
		// directory, so the tails are read from there.
		for i, s := range servers {
			if s != nil {
				s.Kill()
			} else {
				servers[i] = &Server{Addr: procs[i].addr, Dir: procs[i].dir}
			}
		}
		e.Members = servers
		return fmt.Errorf("lockserver: %s ensemble did not start: %w\n%s", e.kind, err, e.LogTails(2048))
	}
	e.Members = servers
	return nil
}

// freePorts returns n distinct free loopback ports (see FreePort).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10*n {
			return nil, errors.New("lockserver: no distinct free ports")
		}
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		dup := false
		for _, q := range ports {
			dup = dup || q == p
		}
		if !dup {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

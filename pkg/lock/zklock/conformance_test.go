package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
)

// The ZooKeeper backend passes the conformance suite on a private server: each
// space is a root node of its own, each open a Backend on a session of its
// own. Pause stops the server's JVM (SIGSTOP); Restart kills it and starts it
// again on its data directory, and the tokens, from the resources' pzxid and
// persisted floor, keep growing across it.
func TestZooKeeperConformance(t *testing.T) {
	s := startServer(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			root := "/conformance-" + randomID()
			return func(t testing.TB) lock.Backend { return open(t, s, root) }
		},
		Pause: func(testing.TB) func() {
			s.Pause()
			return s.Resume
		},
		Restart: func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		},
		TokensSurviveRestart: true,
	})
}

// The suite again on a three-member ensemble, each Backend's URL listing every
// member. Pause stops a majority (SIGSTOP), the leader among them: the member
// left alone stops serving, so no lease can be renewed. Restart kills every
// member and starts them again on their data directories (at once: none
// serves without a quorum); the transaction log keeps the zxids, so tokens
// keep growing across it.
//
// The suite's short TTLs are raised to ensembleMinTTL: on an ensemble every
// obtain and renewal is a quorum write across three JVMs, and the ZooKeeper
// client waits up to two thirds of the session timeout on a member that does
// not answer before it moves the session to another. A 600ms TTL gives an
// obtain 200ms (OpTimeout TTL/3): on a loaded machine it timed out
// ("obtain: context deadline exceeded") on delays the session rides out.
func TestZooKeeperEnsembleConformance(t *testing.T) {
	e := lockservertest.ZooKeeperEnsemble(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			root := "/conformance-" + randomID()
			return func(t testing.TB) lock.Backend { return openOn(t, e.HostList(), root) }
		},
		Pause:                func(t testing.TB) func() { return lockservertest.StopMajority(t, e) },
		Restart:              func(t testing.TB) { lockservertest.RestartAll(t, e) },
		TokensSurviveRestart: true,
		MinTTL:               ensembleMinTTL,
	})
}

// ensembleMinTTL is the least TTL whose shortest call deadline in the suite,
// OpTimeout TTL/4, outlasts the client's wait on a silent member (two thirds
// of sessionTimeout): a lease then survives what the session survives, and is
// lost only when the ensemble cannot answer (the suite's Pause).
const ensembleMinTTL = 4 * (2 * sessionTimeout / 3)

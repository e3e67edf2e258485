package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
)

// The etcd backend passes the conformance suite on a private etcd: each space
// is a key prefix of its own, each open a Backend on a client of its own.
// Pause stops the etcd process (SIGSTOP): no renewal answers, and its leases
// run out on its clock while it is stopped. Restart kills it and starts it on
// the same data directory; tokens are revisions, which etcd persists, so they
// keep growing across it.
func TestEtcdConformance(t *testing.T) {
	s := startEtcd(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			sp := newSpace(t, s)
			return func(t testing.TB) lock.Backend { return sp.open(t) }
		},
		Pause: func(testing.TB) func() {
			s.Pause()
			return s.Resume
		},
		Restart: func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		},
		TokensSurviveRestart: true,
		MinTTL:               etcdMinTTL,
	})
}

// etcdMinTTL is the least TTL the watchdog's tests use on etcd. etcd grants
// leases in whole seconds, so the suite's 600ms is a second on the server but
// 600ms to the Client, whose renewal must then land within 400ms; and the
// leader answers a keepalive only once it has applied what it committed, so a
// renewal waits behind the other process's obtains, each an fsync. On a busy
// CI machine one fsync took longer than that (the watchdog test lost its lease
// after a second). Two seconds leave a renewal more than a second.
const etcdMinTTL = 2 * time.Second

// The suite again on a three-member cluster, each Backend's URL listing every
// member. Pause stops a majority (SIGSTOP), the leader among them, so that no
// lease can be renewed; Restart kills every member and starts them again on
// their data directories (at once: none serves without a quorum). Revisions
// are the cluster's, committed by a quorum, so tokens keep growing across it.
func TestEtcdClusterConformance(t *testing.T) {
	e := lockservertest.EtcdCluster(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			sp := newSpaceOn(t, e.HostList())
			return func(t testing.TB) lock.Backend { return sp.open(t) }
		},
		Pause:                func(t testing.TB) func() { return lockservertest.StopMajority(t, e) },
		Restart:              func(t testing.TB) { lockservertest.RestartAll(t, e) },
		TokensSurviveRestart: true,
		MinTTL:               etcdMinTTL,
	})
}

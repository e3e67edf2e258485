// Package lockservertest starts the servers of package lockserver for a test:
// on free loopback ports, in the test's temporary directory, removed when the
// test ends. A server that is not installed skips the test, or fails it when
// STOCKGUARD_TEST_REQUIRE_REAL=1 (as CI sets it), so that no run passes by
// testing nothing.
package lockservertest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startTimeout bounds a start: a JVM on a loaded machine takes seconds.
const startTimeout = time.Minute

// Etcd starts a private single-member etcd (lockserver.StartEtcd).
func Etcd(tb testing.TB) *lockserver.Server {
	tb.Helper()
	return start(tb, lockserver.StartEtcd, (*lockserver.Server).Close)
}

// ZooKeeper starts a private standalone ZooKeeper (lockserver.StartZooKeeper).
func ZooKeeper(tb testing.TB) *lockserver.Server {
	tb.Helper()
	return start(tb, lockserver.StartZooKeeper, (*lockserver.Server).Close)
}

// EtcdCluster starts a private three-member etcd cluster
// (lockserver.StartEtcdCluster); when the test fails, its members' log tails
// are printed.
func EtcdCluster(tb testing.TB) *lockserver.Ensemble {
	tb.Helper()
	e := start(tb, lockserver.StartEtcdCluster, (*lockserver.Ensemble).Close)
	logTailsOnFailure(tb, e)
	return e
}

// ZooKeeperEnsemble starts a private three-member ZooKeeper ensemble
// (lockserver.StartZooKeeperEnsemble); when the test fails, its members' log
// tails are printed.
func ZooKeeperEnsemble(tb testing.TB) *lockserver.Ensemble {
	tb.Helper()
	e := start(tb, lockserver.StartZooKeeperEnsemble, (*lockserver.Ensemble).Close)
	logTailsOnFailure(tb, e)
	return e
}

// logTailsOnFailure prints the tail of every member's log when tb has failed,
// before the ensemble's directory is removed (cleanups run last first).
func logTailsOnFailure(tb testing.TB, e *lockserver.Ensemble) {
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("the ensemble's logs:\n%s", e.LogTails(4096))
		}
	})
}

// Azurite starts a private Azurite blob service (lockserver.StartAzurite).
func Azurite(tb testing.TB) *lockserver.AzuriteServer {
	tb.Helper()
	return start(tb, lockserver.StartAzurite, func(s *lockserver.AzuriteServer) error { return s.Close() })
}

// start runs startFn, again up to twice when it fails for another reason than
// the server missing (a port found free can be taken before the server binds
// it), and closes the server when the test ends.
func start[S any](tb testing.TB, startFn func(context.Context, string) (S, error), closeFn func(S) error) S {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var s S
	var err error
	for range 3 {
		if s, err = startFn(ctx, tb.TempDir()); err == nil || errors.Is(err, lockserver.ErrNotInstalled) || ctx.Err() != nil {
			break
		}
	}
	switch {
	case errors.Is(err, lockserver.ErrNotInstalled) && os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") != "1":
		tb.Skip(err)
	case err != nil:
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = closeFn(s) })
	return s
}

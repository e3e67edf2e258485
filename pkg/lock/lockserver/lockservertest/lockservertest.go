// Package lockservertest starts the servers of package lockserver for a test:
// on free loopback ports, in the test's temporary directory, removed when the
// test ends. A server that is not installed skips the test, or fails it when
// STOCKGUARD_TEST_REQUIRE_REAL=1 (as CI sets it), so that no run passes by
// testing nothing.
package lockservertest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// startTimeout bounds a start: a JVM on a loaded machine takes seconds.
const startTimeout = time.Minute

// RedisServer is a private redis-server for a test that stops, stalls, kills
// or restarts it (lockserver.StartRedis).
type RedisServer struct {
	*lockserver.Server
}

// Redis starts a private redis-server that allows DEBUG (for DEBUG SLEEP).
func Redis(tb testing.TB) *RedisServer {
	tb.Helper()
	return RedisWith(tb, lockserver.RedisOptions{Debug: true})
}

// RedisWith starts a private redis-server as opt says: a replica, a sentinel or
// a Redis Cluster node.
func RedisWith(tb testing.TB, opt lockserver.RedisOptions) *RedisServer {
	tb.Helper()
	s := start(tb, func(ctx context.Context, parent string) (*lockserver.Server, error) {
		return lockserver.StartRedis(ctx, parent, opt)
	}, (*lockserver.Server).Close)
	return &RedisServer{Server: s}
}

// Restart kills the server and starts an empty one on the same port, as a
// Redis without persistence comes back after a crash; it fails the test when
// the server does not answer within a minute.
func (s *RedisServer) Restart(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.Server.Restart(ctx); err != nil {
		tb.Fatal(err)
	}
}

// String names the server for test logs.
func (s *RedisServer) String() string { return "redis-server " + s.Addr }

// FreePort returns a loopback TCP port nothing listens on now
// (lockserver.FreePort), failing the test when there is none.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return FreePortOn(tb, "127.0.0.1")
}

// FreePortOn is FreePort on host (lockserver.FreePortOn).
func FreePortOn(tb testing.TB, host string) int {
	tb.Helper()
	p, err := lockserver.FreePortOn(host)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Etcd starts a private single-member etcd (lockserver.StartEtcd).
func Etcd(tb testing.TB) *lockserver.Server {
	tb.Helper()
	return start(tb, lockserver.StartEtcd, (*lockserver.Server).Close)
}

// EtcdV2 starts a private single-member etcd that serves the v2 API too
// (lockserver.StartEtcdV2).
func EtcdV2(tb testing.TB) *lockserver.Server {
	tb.Helper()
	return start(tb, lockserver.StartEtcdV2, (*lockserver.Server).Close)
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

// SkipNotInstalled ends the test when err says a server is not on this
// machine (it wraps lockserver.ErrNotInstalled): skipped with err as its
// reason, or failed under STOCKGUARD_TEST_REQUIRE_REAL=1, where a run must
// not pass by testing nothing. Any other err, nil included, is left to the
// caller.
func SkipNotInstalled(tb testing.TB, err error) {
	tb.Helper()
	if !errors.Is(err, lockserver.ErrNotInstalled) {
		return
	}
	if RequireReal() {
		tb.Fatal(err)
	}
	tb.Skip(err)
}

// NeedService skips the test (or fails it under STOCKGUARD_TEST_REQUIRE_REAL=1)
// when the servers of lock URL scheme (redlock, etcd, zk, azblob:
// lockserver.Installed) are not on this machine, with the reason the tests
// that start those servers skip with; it starts nothing.
func NeedService(tb testing.TB, scheme string) {
	tb.Helper()
	err := lockserver.Installed(scheme)
	SkipNotInstalled(tb, err)
	if err != nil {
		tb.Fatal(err)
	}
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
	SkipNotInstalled(tb, err)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = closeFn(s) })
	return s
}

// StopMajority stops (SIGSTOP) the ensemble's leader and one other member, so
// that nothing can be written, and returns the function that continues them
// and waits (a minute at most) until the ensemble has a leader again: a
// single server answers as soon as it continues, an ensemble only once it has
// elected one.
func StopMajority(tb testing.TB, e *lockserver.Ensemble) (resume func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	leader, err := e.WaitLeader(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	other := (leader + 1) % len(e.Members)
	e.Stop(leader)
	e.Stop(other)
	return func() {
		e.Cont(leader)
		e.Cont(other)
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		if _, err := e.WaitLeader(ctx); err != nil {
			tb.Error(err)
		}
	}
}

// RestartAll kills every member of the ensemble and starts them again on their
// data, at once (none serves without a quorum), and waits for a leader.
func RestartAll(tb testing.TB, e *lockserver.Ensemble) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i := range e.Members {
		e.Kill(i)
	}
	errs := make([]error, len(e.Members))
	var wg sync.WaitGroup
	for i := range e.Members {
		wg.Go(func() { errs[i] = e.Restart(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatal(err)
	}
	if _, err := e.WaitLeader(ctx); err != nil {
		tb.Fatal(err)
	}
}

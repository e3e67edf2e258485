package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
)

// ZooKeeper is a private standalone ZooKeeper server for a test.
type ZooKeeper struct {
	*lockserver.Server
}

// StartZooKeeper starts a ZooKeeper server on a free loopback port, in the
// test's temporary directory, and stops it when the test ends. Without java
// and ZooKeeper installed the test is skipped, or fails under
// STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var s *lockserver.Server
	var err error
	for range 3 { // a port found free may be taken before the server binds it
		if s, err = lockserver.StartZooKeeper(ctx, t.TempDir()); err == nil || errors.Is(err, lockserver.ErrNotInstalled) {
			break
		}
	}
	switch {
	case errors.Is(err, lockserver.ErrNotInstalled) && !RequireReal():
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &ZooKeeper{Server: s}
}

// URL is the --lock-url of the server, with a chroot of the test's own.
func (z *ZooKeeper) URL() string { return "zk://" + z.Addr + "/t" + RandomID() }

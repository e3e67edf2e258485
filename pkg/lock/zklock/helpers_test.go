package zklock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// startServer starts a private ZooKeeper for the test (lockservertest).
func startServer(tb testing.TB) *lockserver.Server {
	tb.Helper()
	return lockservertest.ZooKeeper(tb)
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// open returns a Backend on a session of its own, under root, closed when
// the test ends.
func open(tb testing.TB, s *lockserver.Server, root string) *zklock.Backend {
	tb.Helper()
	return openOn(tb, s.Addr, root)
}

// sessionTimeout is the session timeout the tests' Backends ask for: 10 of
// the test servers' ticks.
const sessionTimeout = 2 * time.Second

// openOn is open on the servers of hosts (host:port, or a comma-separated
// list of an ensemble's members).
func openOn(tb testing.TB, hosts, root string) *zklock.Backend {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := zklock.Open(ctx, "zk://"+hosts, &zklock.Options{Root: root, SessionTimeout: sessionTimeout, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(b.Close)
	return b
}

// testLogger writes to the test's log.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlog{tb}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tlog struct{ tb testing.TB }

func (w tlog) Write(p []byte) (int, error) { w.tb.Log(string(p)); return len(p), nil }

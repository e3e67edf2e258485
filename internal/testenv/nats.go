package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stockguard/stockguard/internal/topology"
)

// NATSEnv names the NATS server (JetStream enabled) that tests share, as a
// nats:// URL.
const NATSEnv = "STOCKGUARD_TEST_NATS_URL"

// NATSURL returns STOCKGUARD_TEST_NATS_URL. Unset, the test is skipped, or
// fails under STOCKGUARD_TEST_REQUIRE_REAL=1. Tests on it share the server:
// each uses a stream and subjects of its own (NATSNames) and deletes its
// stream at the end.
func NATSURL(t testing.TB) string {
	t.Helper()
	return serverURL(t, NATSEnv, "nats")
}

// NATSNames returns a stream name and a subject prefix of the test's own, on
// a shared server: STOCKGUARD_T<id> and t<id>.sku (the stream's subjects are
// prefix + ".>").
func NATSNames() (stream, prefix string) {
	id := RandomID()
	return "STOCKGUARD_T" + strings.ToUpper(id), "t" + id + ".sku"
}

// NATSServer is a private nats-server with JetStream (topology.NATSServer), on
// a free loopback port with its store in the test's temporary directory, for
// a test that stops and restarts it: the store outlives Kill and Stop, so
// Start brings back the streams and their messages (and the duplicate
// windows' ids).
type NATSServer struct {
	*topology.NATSServer
	t testing.TB
}

// StartNATS starts a private nats-server -js and stops it when the test ends.
// Without nats-server on the PATH (Debian: apt-get install nats-server) the
// test is skipped, or fails under STOCKGUARD_TEST_REQUIRE_REAL=1.
func StartNATS(t testing.TB) *NATSServer {
	t.Helper()
	s, err := topology.StartNATS(context.Background(), t.TempDir(), "stockguard-test-"+RandomID())
	switch {
	case errors.Is(err, topology.ErrNoNATS) && RequireReal():
		t.Fatalf("%v and STOCKGUARD_TEST_REQUIRE_REAL=1", err)
	case errors.Is(err, topology.ErrNoNATS):
		t.Skip(err.Error())
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return &NATSServer{NATSServer: s, t: t}
}

// Start starts the server again on the same port and store, and fails the
// test when it does not answer within a minute.
func (s *NATSServer) Start() {
	s.t.Helper()
	if err := s.NATSServer.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

package redlock_test

// Private redis-server processes for the tests: a Redlock test needs several
// independent masters it can kill, pause and restart. The library may not import
// the service's internal/testenv (depguard's pkg-standalone rule covers tests),
// so this package keeps its own helper, as pkg/lock does.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// go-redis logs its reconnection attempts; tests that kill servers on purpose
// would drown their own output in them.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// redisServer is a private redis-server that keeps nothing on disk.
type redisServer = lockservertest.RedisServer

// startRedisServer starts a redis-server on a free loopback port and stops it
// when the test ends (lockservertest.Redis).
func startRedisServer(tb testing.TB) *redisServer { return lockservertest.Redis(tb) }

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testTimeouts are the node timeouts of the tests' backends: longer than
// ParseURL's defaults, so that a node slowed by a busy machine (two cores, the
// race detector, other work) is not taken for a dead one; a paused node costs a
// call this much.
const testTimeouts = "dial_timeout=1s&read_timeout=1s&write_timeout=1s&pool_timeout=1s"

// nodes is a Redlock test setup: independent redis-servers and a namespace.
type nodes struct {
	servers []*redisServer
	keys    redislease.Keys
}

func startNodes(tb testing.TB, n int) *nodes {
	tb.Helper()
	ns := &nodes{keys: redislease.Keys{Namespace: "t" + randomID()}}
	for range n {
		ns.servers = append(ns.servers, startRedisServer(tb))
	}
	tb.Cleanup(func() { // a test that fails while a node is paused must not leave it stopped
		for _, s := range ns.servers {
			s.Resume()
		}
	})
	return ns
}

// url is the redlock URL of the servers, with the tests' timeouts.
func (ns *nodes) url() string {
	addrs := make([]string, len(ns.servers))
	for i, s := range ns.servers {
		addrs[i] = s.Addr
	}
	return "redlock://" + strings.Join(addrs, ",") + "/0?" + testTimeouts
}

// open returns a Backend on its own connections, as a separate process would
// have; they are closed when the test ends.
func (ns *nodes) open(tb testing.TB) *redlock.Backend {
	tb.Helper()
	return ns.openWith(tb, &redlock.Options{Keys: ns.keys})
}

// openWith is open with other options.
func (ns *nodes) openWith(tb testing.TB, opt *redlock.Options) *redlock.Backend {
	tb.Helper()
	opts, err := redlock.ParseURL(ns.url())
	if err != nil {
		tb.Fatal(err)
	}
	clients := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		c := redis.NewClient(o)
		tb.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	b, err := redlock.New(clients, opt)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// direct returns a plain client on node i, for the test to read and prime keys.
func (ns *nodes) direct(tb testing.TB, i int) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: ns.servers[i].Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// block makes node i refuse name: another value holds its lock there.
func (ns *nodes) block(tb testing.TB, i int, name string) {
	tb.Helper()
	if err := ns.direct(tb, i).Set(tb.Context(), ns.keys.Lock(name), "someone-else", time.Minute).Err(); err != nil {
		tb.Fatal(err)
	}
}

// unblock removes what block set.
func (ns *nodes) unblock(tb testing.TB, i int, name string) {
	tb.Helper()
	if err := ns.direct(tb, i).Del(tb.Context(), ns.keys.Lock(name)).Err(); err != nil {
		tb.Fatal(err)
	}
}

// setCounter primes node i's token counter of name.
func (ns *nodes) setCounter(tb testing.TB, i int, name string, v int64) {
	tb.Helper()
	if err := ns.direct(tb, i).Set(tb.Context(), ns.keys.Fence(name), v, time.Hour).Err(); err != nil {
		tb.Fatal(err)
	}
}

// counter reads node i's token counter of name (0 when it has none).
func (ns *nodes) counter(tb testing.TB, i int, name string) int64 {
	tb.Helper()
	v, err := ns.direct(tb, i).Get(tb.Context(), ns.keys.Fence(name)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	return v
}

// lockValue reads node i's lock of name ("" when free).
func (ns *nodes) lockValue(tb testing.TB, i int, name string) string {
	tb.Helper()
	v, err := ns.direct(tb, i).Get(tb.Context(), ns.keys.Lock(name)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatal(err)
	}
	return v
}

// opCtx is a call's context with a generous deadline for a busy machine.
func opCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// obtainEventually retries an Obtain refused while a restarted node's pooled
// connections are found dead (they fail once each, with retries off), for at
// most 50 tries and 20s.
func obtainEventually(tb testing.TB, b *redlock.Backend, name, value string, block int64) int64 {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for try := 0; try < 50 && time.Now().Before(deadline); try++ {
		var tops []int64
		tops, err = b.Obtain(opCtx(tb), []string{name}, value, 30*time.Second, block)
		if err == nil {
			return tops[0]
		}
	}
	tb.Fatalf("obtain %s: %v", name, err)
	return 0
}

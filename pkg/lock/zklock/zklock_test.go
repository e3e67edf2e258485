package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		servers []string
		chroot  string
		bad     bool
	}{
		{url: "zk://h1:2181", servers: []string{"h1:2181"}},
		{url: "zk://h1:2181,h2:2182/", servers: []string{"h1:2181", "h2:2182"}},
		{url: "zk://h1,h2/app/locks", servers: []string{"h1:2181", "h2:2181"}, chroot: "/app/locks"},
		{url: "zk://[::1]:2181/x/", servers: []string{"[::1]:2181"}, chroot: "/x"},
		{url: "zk://u:secret@h1:2181", bad: true},
		{url: "zk://h1:2181?session_timeout=1s", bad: true},
		{url: "zk://h1:2181,,h2", bad: true},
		{url: "zk://h1/a//b", bad: true},
		{url: "redis://h1:6379", bad: true},
	} {
		servers, chroot, err := zklock.ParseURL(tc.url)
		switch {
		case tc.bad && !errors.Is(err, lock.ErrInvalidOptions):
			t.Errorf("%s: %v, want ErrInvalidOptions", tc.url, err)
		case tc.bad:
			if msg := err.Error(); len(msg) == 0 || strings.Contains(msg, "secret") {
				t.Errorf("%s: error %q shows the password", tc.url, msg)
			}
		case err != nil || !slices.Equal(servers, tc.servers) || chroot != tc.chroot:
			t.Errorf("%s: %v %q %v, want %v %q", tc.url, servers, chroot, err, tc.servers, tc.chroot)
		}
	}
}

// Names ZooKeeper would refuse, and blocks past MaxBlock, are refused before
// any request.
func TestInvalidCalls(t *testing.T) {
	if _, err := zklock.New([]string{"127.0.0.1:1"}, &zklock.Options{Root: "locks"}); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("relative Root: %v, want ErrInvalidOptions", err)
	}
	b, err := zklock.New([]string{"127.0.0.1:1"}, nil) // never dialled successfully: no call reaches it
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, names := range [][]string{nil, {""}, {"a/b"}, {".."}, {"x\x01"}} {
		if _, err := b.Obtain(ctx, names, "v", time.Second, 1); !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("names %q: %v, want ErrInvalidName", names, err)
		}
	}
	if _, err := b.Obtain(ctx, []string{"a"}, "v", time.Second, zklock.MaxBlock+1); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Errorf("block over MaxBlock: %v, want ErrInvalidOptions", err)
	}
	if _, err := b.Obtain(ctx, []string{"a"}, "v/w", time.Second, 1); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Errorf("value with '/': %v, want ErrInvalidOptions", err)
	}
}

// Tokens grow from holder to holder however the previous lease ended: its
// session closed (the server deletes the node), its TTL ended (taken over),
// released after an Advance far past its token.
func TestTokensGrowHoweverTheLeaseEnds(t *testing.T) {
	s := startServer(t)
	root := "/tokens-" + randomID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obtain := func(b *zklock.Backend, v string, ttl time.Duration) int64 {
		t.Helper()
		for range 200 { // a taken-over lease is free once its TTL has passed on the leader's clock
			tops, err := b.Obtain(ctx, []string{"r"}, v, ttl, 33)
			if err == nil {
				return tops[0]
			}
			if !errors.Is(err, lock.ErrBusy) {
				t.Fatal(err)
			}
			select {
			case <-ctx.Done():
				t.Fatal("not obtained")
			case <-time.After(20 * time.Millisecond):
			}
		}
		t.Fatal("not obtained in 200 tries")
		return 0
	}
	// Session closed while holding.
	first := open(t, s, root)
	t1 := obtain(first, "v1", 10*time.Second)
	first.Close()
	b := open(t, s, root)
	t2 := obtain(b, "v2", 300*time.Millisecond)
	if t2-33 < t1 {
		t.Fatalf("after a closed session: block up to %d, not above %d", t2, t1)
	}
	// Left to end by its TTL, then taken over by another session.
	other := open(t, s, root)
	t3 := obtain(other, "v3", 10*time.Second)
	if t3-33 < t2 {
		t.Fatalf("after a takeover: block up to %d, not above %d", t3, t2)
	}
	if held, err := b.Held(ctx, "r", "v2"); err != nil || held {
		t.Fatalf("the taken-over lease is still held: %v %v", held, err)
	}
	if err := b.Renew(ctx, []string{"r"}, "v2", time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("renewal of a taken-over lease: %v, want ErrNotHeld", err)
	}
	// Advanced far, released.
	past := t3 + 1_000_000_000
	n, err := other.Advance(ctx, "r", "v3", past)
	if err != nil || n <= past {
		t.Fatalf("advance past %d: %d, %v", past, n, err)
	}
	if err := other.Release(ctx, []string{"r"}, "v3"); err != nil {
		t.Fatal(err)
	}
	t4 := obtain(b, "v4", 10*time.Second)
	if t4-33 < n {
		t.Fatalf("after an advance to %d: block up to %d", n, t4)
	}
}

// A waiter that found the resource busy hears of its release.
func TestReleaseAnnounced(t *testing.T) {
	s := startServer(t)
	root := "/announce-" + randomID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, waiter := open(t, s, root), open(t, s, root)
	names, stop, err := waiter.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	if _, err := holder.Obtain(ctx, []string{"r"}, "h", 10*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Obtain(ctx, []string{"r"}, "w", 10*time.Second, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while held: %v, want ErrBusy", err)
	}
	// A renewal in between fires the watch, which is set again.
	if err := holder.Renew(ctx, []string{"r"}, "h", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, []string{"r"}, "h"); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-names:
		if n != "r" {
			t.Fatalf("announced %q, want r", n)
		}
	case <-ctx.Done():
		t.Fatal("the release was not announced")
	}
	if _, err := waiter.Obtain(ctx, []string{"r"}, "w2", 10*time.Second, 1); err != nil {
		t.Fatalf("obtain after the announced release: %v", err)
	}
}

// A session that expires takes its lease nodes with it; the Backend then
// forgets its leases, so that Held and Renew answer at once, without the
// server. The fault cuts the client off (its connection closed, its dials
// refused) while the server runs on: the server, not a guess at its timing,
// expires the session, and the test waits until it has (another session gets
// the resource, whose lease has a minute left) before it lets the client back.
// Pausing the server instead left a race on resume between the server's
// expiry and the client's reconnection, which revives the session.
func TestSessionExpiryLosesLeases(t *testing.T) {
	s := startServer(t)
	root := "/expiry-" + randomID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cut cutter
	b, err := zklock.Open(ctx, "zk://"+s.Addr, &zklock.Options{Root: root, SessionTimeout: sessionTimeout, Dialer: cut.dial, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Obtain(ctx, []string{"r"}, "v", time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	other := open(t, s, root)
	cut.cut()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := other.Obtain(ctx, []string{"r"}, "w", time.Minute, 1)
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrBusy) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("the cut-off session's lease node outlived the session timeout by a minute")
		case <-tick.C:
		}
	}
	cut.restore()
	for {
		held, err := b.Held(ctx, "r", "v")
		if err == nil && !held {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still held (%v, %v) a minute after the server expired the session", held, err)
		case <-tick.C:
		}
	}
	// The lease is forgotten: with the server stopped, Held and Renew still
	// answer at once.
	s.Pause()
	defer s.Resume()
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if held, err := b.Held(short, "r", "v"); err != nil || held {
		t.Fatalf("Held after the session expired: %v, %v; want false at once", held, err)
	}
	if err := b.Renew(short, []string{"r"}, "v", time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Renew after the session expired: %v, want ErrNotHeld at once", err)
	}
}

// cutter is a Dialer that the test can cut off from the server: cut closes
// the connections it made and refuses new ones until restore.
type cutter struct {
	mu    sync.Mutex
	off   bool
	conns []net.Conn
}

func (c *cutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		_ = conn.Close()
		return nil, errors.New("cut off by the test")
	}
	c.conns = append(c.conns, conn)
	return conn, nil
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

func (c *cutter) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = false
}

// bounce closes the connections the cutter made and lets the client dial
// again: the session moves to a new connection.
func (c *cutter) bounce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// A waiter's Backend keeps working, and hears of releases, across
// reconnections made while it watches holders and has calls under way. The
// ZooKeeper client re-registers a session's watches on each new connection
// while it already reads that connection's answers, and reads unguarded
// connection state doing so (a data race in go-zookeeper/zk v1.0.4 that -race
// reported): the Backend keeps its watches off the session that reconnects,
// which this test exercises under -race.
func TestReconnectWhileWatching(t *testing.T) {
	s := startServer(t)
	root := "/reconnect-" + randomID()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder := open(t, s, root)
	var cut cutter
	waiter, err := zklock.Open(ctx, "zk://"+s.Addr, &zklock.Options{Root: root, SessionTimeout: sessionTimeout, Dialer: cut.dial, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	names, stop, err := waiter.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	var rs []string // many watches: re-registering them takes a while
	for i := range 32 {
		rs = append(rs, fmt.Sprintf("r%d", i))
	}
	if _, err := holder.Obtain(ctx, rs, "h", time.Minute, 1); err != nil {
		t.Fatal(err)
	}
	// Tries that find the resources busy, which watch their holder.
	try := func() {
		t.Helper()
		for _, r := range rs {
			if _, err := waiter.Obtain(ctx, []string{r}, "w", time.Minute, 1); !errors.Is(err, lock.ErrBusy) {
				t.Fatalf("obtain %s while held: %v, want ErrBusy", r, err)
			}
		}
	}
	// Calls under way at every reconnection: they are queued while the client
	// is cut off and answered as soon as it is back.
	busy, stopBusy := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for busy.Err() == nil {
				_ = waiter.Ping(busy)
			}
		})
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range 8 {
		try()
		cut.bounce()
		// Back once a ping answers (those in between fail as the client
		// reconnects).
		for waiter.Ping(ctx) != nil {
			select {
			case <-ctx.Done():
				t.Fatal("no answer a minute after a reconnection")
			case <-tick.C:
			}
		}
	}
	stopBusy()
	wg.Wait()
	try()
	// Releases are still heard (a watch lost with its connection wakes the
	// waiters too, so drain until the resource is free).
	if err := holder.Release(ctx, rs, "h"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-names:
		case <-ctx.Done():
			t.Fatal("the release was not announced")
		}
		if _, err := waiter.Obtain(ctx, []string{"r0"}, "w2", time.Minute, 1); err == nil {
			return
		} else if !errors.Is(err, lock.ErrBusy) {
			t.Fatal(err)
		}
	}
}

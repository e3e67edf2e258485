package zklock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// ZooKeeper's request opcodes, as they go on the wire.
var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData", 12: "getChildren", 14: "multi"}

// requests records the requests written on the first connection a dialer
// made (the Backend's session; watches dial sessions of their own), pings
// left out.
type requests struct {
	mu    sync.Mutex
	conns int
	ops   []string
}

func (r *requests) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(context.Background(), network, addr) // the client's Dialer takes no context
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns++
	if r.conns > 1 {
		return c, nil
	}
	return &requestConn{Conn: c, r: r}, nil
}

// since returns the requests since the last call.
func (r *requests) since() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.ops
	r.ops = nil
	return out
}

type requestConn struct {
	net.Conn
	r *requests
}

// Write reads the opcode of a request: the client writes each request whole,
// length, xid, opcode first.
func (c *requestConn) Write(p []byte) (int, error) {
	if len(p) >= 12 {
		if op, ok := opNames[int32(binary.BigEndian.Uint32(p[8:12]))]; ok {
			c.r.mu.Lock()
			c.r.ops = append(c.r.ops, op)
			c.r.mu.Unlock()
		}
	}
	return c.Conn.Write(p)
}

// The requests of Obtain, Renew and Release of several names: an uncontended
// obtain is one transaction, then one read per resource (pipelined: the client
// has no read-only transaction); a renewal and a release one transaction each,
// whatever the number of names.
func TestRequestsPerCall(t *testing.T) {
	s := startServer(t)
	root := "/rt-" + randomID()
	other := open(t, s, root)
	r := &requests{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := zklock.Open(ctx, "zk://"+s.Addr, &zklock.Options{Root: root, SessionTimeout: sessionTimeout, Logger: testLogger(t), Dialer: r.dial})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const ttl = 10 * time.Second
	// The resource nodes made on first use.
	if _, err := b.Obtain(ctx, names, "warm", ttl, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, names, "warm"); err != nil {
		t.Fatal(err)
	}
	reads := slices.Repeat([]string{"getData"}, len(names))
	r.since()
	check := func(what string, want []string) {
		t.Helper()
		got := r.since()
		slices.Sort(got) // pipelined requests go in any order
		want = slices.Sorted(slices.Values(want))
		if !slices.Equal(got, want) {
			t.Errorf("%s of %d names: requests %q, want %q", what, len(names), got, want)
		}
	}
	if _, err := b.Obtain(ctx, names, "v", ttl, 1); err != nil {
		t.Fatal(err)
	}
	check("obtain", append([]string{"multi"}, reads...))
	if err := b.Renew(ctx, names, "v", ttl); err != nil {
		t.Fatal(err)
	}
	check("renew", []string{"multi"})
	if err := b.Release(ctx, names, "v"); err != nil {
		t.Fatal(err)
	}
	check("release", []string{"multi"})
	for _, n := range names {
		if held, err := b.Held(ctx, n, "v"); err != nil || held {
			t.Fatalf("%s held after its release (%v, %v)", n, held, err)
		}
	}
	if _, err := other.Obtain(ctx, names[5:6], "holder", ttl, 1); err != nil {
		t.Fatal(err)
	}
	r.since()
	if _, err := b.Obtain(ctx, names, "refused", ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while %s is held: %v, want ErrBusy", names[5], err)
	}
	// The busy resource's children, our node and the holder's read; then our
	// nodes deleted in one transaction.
	check("busy obtain", append([]string{"multi", "getChildren", "exists", "getData", "multi"}, reads...))
}

// A release whose transaction fails because one node is already gone (deleted
// by someone else, its session expired) still deletes the others.
func TestReleaseWithANodeGone(t *testing.T) {
	s := startServer(t)
	root := "/gone-" + randomID()
	b := open(t, s, root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "b", "c"}
	if _, err := b.Obtain(ctx, names, "v", 10*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	conn, _, err := zk.Connect([]string{s.Addr}, sessionTimeout, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kids, _, err := conn.Children(root + "/b")
	if err != nil || len(kids) != 1 {
		t.Fatalf("the lease nodes of b: %q, %v", kids, err)
	}
	if err := conn.Delete(root+"/b/"+kids[0], -1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, names, "v"); err != nil {
		t.Fatalf("release with b's node gone: %v", err)
	}
	for _, n := range []string{"a", "c"} {
		kids, _, err := conn.Children(root + "/" + n)
		if err != nil || len(kids) != 0 {
			t.Fatalf("%s's lease nodes after the release: %q, %v", n, kids, err)
		}
	}
	if _, err := open(t, s, root).Obtain(ctx, names, "next", 10*time.Second, 1); err != nil {
		t.Fatalf("obtain after the release: %v", err)
	}
}

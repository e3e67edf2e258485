package etcdlock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

// rpcs records the gRPC calls a client makes (unary calls and streams opened):
// each is a round trip.
type rpcs struct {
	mu    sync.Mutex
	calls []string
}

func (r *rpcs) add(method string) {
	r.mu.Lock()
	r.calls = append(r.calls, method[1+len("etcdserverpb."):]) // "/etcdserverpb.KV/Txn" -> "KV/Txn"
	r.mu.Unlock()
}

// since returns the calls since the last call.
func (r *rpcs) since() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *rpcs) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// The calls of Obtain, Renew and Release of several names, counted at the
// gRPC client: an obtain is a lease grant and one transaction, a renewal one
// keep-alive, a release one revocation (or, for some of a lease's names or a
// value this Backend did not obtain, one transaction), whatever the number of
// names.
func TestRoundTripsPerCall(t *testing.T) {
	s := startEtcd(t)
	sp := newSpace(t, s)
	other := sp.open(t)
	cfg, prefix, err := etcdlock.ParseURL(sp.url())
	if err != nil {
		t.Fatal(err)
	}
	r := &rpcs{}
	cfg.DialOptions = append(cfg.DialOptions, r.options()...)
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdlock.New(cli, &etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(); _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const ttl = 10 * time.Second
	v := value(t)
	r.since()
	check := func(what string, want ...string) {
		t.Helper()
		if got := r.since(); !slices.Equal(got, want) {
			t.Errorf("%s of %d names: calls %q, want %q", what, len(names), got, want)
		}
	}
	if _, err := b.Obtain(ctx, names, v, ttl, 1); err != nil {
		t.Fatal(err)
	}
	check("obtain", "Lease/LeaseGrant", "KV/Txn")
	if err := b.Renew(ctx, names, v, ttl); err != nil {
		t.Fatal(err)
	}
	check("renew", "Lease/LeaseKeepAlive")
	if err := b.Release(ctx, names[:6], v); err != nil {
		t.Fatal(err)
	}
	check("release of some", "KV/Txn")
	if err := b.Release(ctx, names[6:], v); err != nil {
		t.Fatal(err)
	}
	check("release of the rest", "Lease/LeaseRevoke")
	for _, n := range names {
		if held, err := other.Held(ctx, n, v); err != nil || held {
			t.Fatalf("%s held after its release (%v, %v)", n, held, err)
		}
	}
	// A value another process obtained: released by one transaction that
	// deletes only its keys.
	holder := value(t)
	if _, err := other.Obtain(ctx, names[2:4], holder, ttl, 1); err != nil {
		t.Fatal(err)
	}
	r.since()
	if err := b.Release(ctx, names, holder); err != nil {
		t.Fatal(err)
	}
	check("release of another process's value", "KV/Txn")
	for _, n := range names[2:4] {
		if held, err := other.Held(ctx, n, holder); err != nil || held {
			t.Fatalf("%s held after its release by another process (%v, %v)", n, held, err)
		}
	}
	if _, err := other.Obtain(ctx, names[5:6], holder, ttl, 1); err != nil {
		t.Fatal(err)
	}
	r.since()
	if _, err := b.Obtain(ctx, names, value(t), ttl, 1); !errors.Is(err, lock.ErrBusy) {
		t.Fatalf("obtain while %s is held: %v, want ErrBusy", names[5], err)
	}
	// The unused lease is revoked and the holder's key watched in the
	// background: not the caller's round trips.
	got := r.since()
	if len(got) < 2 || !slices.Equal(got[:2], []string{"Lease/LeaseGrant", "KV/Txn"}) {
		t.Errorf("busy obtain: calls %q, want %q first", got, []string{"Lease/LeaseGrant", "KV/Txn"})
	}
}

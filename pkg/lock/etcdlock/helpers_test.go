package etcdlock_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
)

// startEtcd starts a private etcd for the test (lockservertest).
func startEtcd(t testing.TB) *lockserver.Server {
	t.Helper()
	return lockservertest.Etcd(t)
}

var spaces atomic.Int64

// space is a key prefix of its own on the etcd of hosts (host:port, or a
// comma-separated list of a cluster's members).
type space struct {
	hosts  string
	prefix string
}

func newSpace(t testing.TB, s *lockserver.Server) *space { return newSpaceOn(t, s.Addr) }

func newSpaceOn(t testing.TB, hosts string) *space {
	return &space{hosts: hosts, prefix: fmt.Sprintf("%s/%d", t.Name(), spaces.Add(1))}
}

// url is the space's etcd:// URL.
func (sp *space) url() string { return "etcd://" + sp.hosts + "/" + sp.prefix }

// open returns a Backend on a client of its own, as a new process would have,
// closed when the test ends.
func (sp *space) open(t testing.TB) *etcdlock.Backend {
	t.Helper()
	cfg, prefix, err := etcdlock.ParseURL(sp.url())
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := etcdlock.New(cli, &etcdlock.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(); _ = cli.Close() })
	return b
}

// value is a random-enough owner value.
func value(t testing.TB) string { return fmt.Sprintf("%s-%d", t.Name(), spaces.Add(1)) }

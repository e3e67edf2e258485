package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

// A lock service that does not answer stops the replica at start, with the
// service named and no password shown: one Redis, Redlock (no majority
// answers), PostgreSQL and ZooKeeper.
func TestUnreachableLockServiceFailsAtStart(t *testing.T) {
	free := func() string {
		ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ln.Close() }() // nothing listens there once the test dials
		return ln.Addr().String()
	}
	a, b, c := free(), free(), free()
	for _, tc := range []struct{ url, want string }{
		{"redis://:pw-x9q@" + a + "/0", "lock service redis at redis://" + a + " does not answer"},
		{"redlock://:pw-x9q@" + a + "," + b + "," + c + "/0", "0 of 3 nodes answered, a majority is 2"},
		{"postgres://postgres:pw-x9q@" + a + "/x?sslmode=disable", "lock service postgres at postgres://" + a},
		{"etcd://root:pw-x9q@" + a + "/x", "lock service etcd at etcd://" + a + " does not answer"},
		{"zk://" + a + "," + b + "/pw-x9q", "lock service zk at zk://" + a + "," + b + " does not answer"},
		{"azblob://locks/sku/", "lock service azblob at azblob://locks"},
	} {
		t.Run(strings.SplitN(tc.url, ":", 2)[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			vars := map[string]string{
				"DATABASE_URL":        "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
				"STOCKGUARD_LOCK_URL": tc.url,
				"STOCKGUARD_ADDR":     "127.0.0.1:0",
				// azblob's account: nothing listens at a; the SAS must not show.
				"AZURE_STORAGE_CONNECTION_STRING": "BlobEndpoint=http://" + a + "/devstoreaccount1;SharedAccessSignature=sv=2020-08-04&sig=pw-x9q",
			}
			err := run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("serve started with a lock service that does not answer")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "pw-x9q") {
				t.Fatalf("error %q: want %q, without the password", msg, tc.want)
			}
		})
	}
}

// An azblob:// --lock-url without a usable AZURE_STORAGE_CONNECTION_STRING
// stops the replica at start, naming the variable and showing none of it.
func TestAzblobConnectionStringRequired(t *testing.T) {
	for name, conn := range map[string]string{
		"missing":   "",
		"malformed": "AccountKey=pw-x9q;nonsense",
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			vars := map[string]string{
				"DATABASE_URL":                    "sqlite:" + filepath.Join(t.TempDir(), "x.db"),
				"STOCKGUARD_LOCK_URL":             "azblob://locks",
				"STOCKGUARD_ADDR":                 "127.0.0.1:0",
				"AZURE_STORAGE_CONNECTION_STRING": conn,
			}
			err := run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, io.Discard, io.Discard)
			if err == nil {
				t.Fatal("serve started without a usable connection string")
			}
			if msg := err.Error(); !strings.Contains(msg, "AZURE_STORAGE_CONNECTION_STRING") || strings.Contains(msg, "pw-x9q") {
				t.Fatalf("error %q: want the variable named, nothing of its value", msg)
			}
		})
	}
}

// etcdLockUsed checks that the hot SKU's locks were taken from the etcd of
// lockURL: its lock key has a history there (released since, so its first
// version is read from revision 1 by a watch; the test's etcd never compacts).
func etcdLockUsed(ctx context.Context, t *testing.T, lockURL string) {
	t.Helper()
	cfg, prefix, err := etcdlock.ParseURL(lockURL)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	select {
	case resp := <-cli.Watch(wctx, prefix+"lock/HOT", clientv3.WithRev(1)):
		if resp.Err() != nil || len(resp.Events) == 0 {
			t.Errorf("no history of the lock key of HOT in etcd (%v): its locks were not taken there", resp.Err())
		}
	case <-ctx.Done():
		t.Errorf("no history of the lock key of HOT in etcd: its locks were not taken there")
	}
}

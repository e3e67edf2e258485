package main

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

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

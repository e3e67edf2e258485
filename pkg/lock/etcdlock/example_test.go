package etcdlock_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
)

// A Client on etcd: Open connects and checks that etcd answers, and gives the
// Backend to lock.NewClient. (No output is checked: it needs a server.)
func Example() {
	ctx := context.Background()
	locks, closeEtcd, err := etcdlock.Open(ctx, os.Getenv("ETCD_URL"), nil) // etcd://127.0.0.1:2379/stockguard
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeEtcd()
	client, err := lock.NewClient(locks, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = client.Close() }()

	wait, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = client.Do(wait, []string{"A-1"}, func(ctx context.Context, g *lock.Grant) error {
		// Write with g.Token("A-1") as the fence; ctx ends if the lease is lost.
		fmt.Println("holding", g.Names(), "token", g.Token("A-1"))
		return nil
	})
	fmt.Println("err:", err)
}

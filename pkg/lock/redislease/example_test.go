package redislease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func ExampleNewClient() {
	mr, err := miniredis.Run() // an embedded Redis; use your own server (standalone, Sentinel or Cluster) in real code
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()

	locks, err := redislease.NewClient(rdb, &redislease.Options{Keys: redislease.Keys{Namespace: "sku"}}, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer func() { _ = locks.Close() }()
	err = locks.Do(context.Background(), []string{"A-1"}, func(ctx context.Context, g *lock.Grant) error {
		held, _ := rdb.Get(ctx, "{sku:A-1}:lock").Result()
		fmt.Println("lock key set:", held != "", "token:", g.Token("A-1") > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// lock key set: true token: true
	// err: <nil>
}

func ExampleKeys() {
	k := redislease.Keys{Namespace: "sku"}
	fmt.Println(k.Lock("A-1"), k.Fence("A-1"), k.Channel())
	// Output: {sku:A-1}:lock {sku:A-1}:fence sku:lock:released
}

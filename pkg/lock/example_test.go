package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// The examples run on the Redis backend (redislease) and an embedded Redis, so
// that they run anywhere; any Backend serves the same Client.

// exampleRedis starts an embedded Redis; use your own server (standalone,
// Sentinel or Cluster) in real code.
func exampleRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	return rdb, func() { _ = rdb.Close(); mr.Close() }
}

func Example() {
	rdb, stop := exampleRedis()
	defer stop()

	backend, err := redislease.New(rdb, nil) // or pglock.New, etcdlock.New, ..., or lock.Open by URL
	if err != nil {
		panic(err)
	}
	locks, err := lock.NewClient(backend, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer func() { _ = locks.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the wait budget
	defer cancel()
	err = locks.Do(ctx, []string{"A-1"}, func(ctx context.Context, g *lock.Grant) error {
		// Check stock, write to the database with g.Token("A-1") as the fence, update
		// the cache. ctx is cancelled if the lease is lost.
		fmt.Println("holding", g.Names(), "with a token:", g.Token("A-1") > 0)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// holding [A-1] with a token: true
	// err: <nil>
}

func ExampleClient_Do_multipleResources() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, _ := redislease.NewClient(rdb, nil, nil)
	defer func() { _ = locks.Close() }()

	// Names are sorted and de-duplicated, so two orders over the same SKUs never
	// deadlock whatever order their lines are in.
	_ = locks.Do(context.Background(), []string{"B-2", "A-1", "B-2"}, func(_ context.Context, g *lock.Grant) error {
		fmt.Println(g.Names())
		return nil
	})
	// Output: [A-1 B-2]
}

func ExampleClient_Do_leaseLost() {
	rdb, stop := exampleRedis()
	defer stop()
	locks, _ := redislease.NewClient(rdb, nil, &lock.Options{TTL: 300 * time.Millisecond})
	defer func() { _ = locks.Close() }()

	err := locks.Do(context.Background(), []string{"A-1"}, func(ctx context.Context, _ *lock.Grant) error {
		rdb.Del(ctx, redislease.Keys{}.Lock("A-1")) // someone removes the lock
		<-ctx.Done()                                // the watchdog notices at its next renewal
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, lock.ErrLeaseLost))
	// Output: true
}

func ExampleOpen() {
	mr, err := miniredis.Run() // an embedded Redis; use your own server in real code
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()

	// The scheme picks the backend: a program imports the backends' packages
	// (redislease for redis://, pglock, etcdlock, ...) to register theirs.
	svc, err := lock.Open(ctx, "redis://"+mr.Addr()+"/0", lock.WithNamespace("sku"))
	if err != nil {
		panic(err)
	}
	defer svc.Close()
	locks, err := lock.NewClient(svc.Backend, &lock.Options{TTL: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer func() { _ = locks.Close() }()
	err = locks.Do(ctx, []string{"A-1"}, func(context.Context, *lock.Grant) error { return nil })
	fmt.Println(svc.Kind, "lock taken:", err == nil)

	_, err = lock.Open(ctx, "memcache://127.0.0.1:11211")
	fmt.Println("memcache:", errors.Is(err, lock.ErrInvalidOptions))
	// Output:
	// redis lock taken: true
	// memcache: true
}

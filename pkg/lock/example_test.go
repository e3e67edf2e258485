package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
)

// exampleRedis starts an embedded Redis so that the examples run anywhere; use your
// own server (standalone, Sentinel or Cluster) in real code.
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

	locks, err := lock.New(rdb, &lock.Options{TTL: 5 * time.Second})
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
	locks, _ := lock.New(rdb, nil)
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
	locks, _ := lock.New(rdb, &lock.Options{TTL: 300 * time.Millisecond})
	defer func() { _ = locks.Close() }()

	err := locks.Do(context.Background(), []string{"A-1"}, func(ctx context.Context, _ *lock.Grant) error {
		rdb.Del(ctx, lock.Keys{}.Lock("A-1")) // someone removes the lock
		<-ctx.Done()                          // the watchdog notices at its next renewal
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, lock.ErrLeaseLost))
	// Output: true
}

func ExampleNewMetrics() {
	rdb, stop := exampleRedis()
	defer stop()

	metrics := lock.NewMetrics("stockguard")
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	locks, _ := lock.New(rdb, &lock.Options{Metrics: metrics})
	defer func() { _ = locks.Close() }()

	_ = locks.Do(context.Background(), []string{"A-1"}, func(context.Context, *lock.Grant) error { return nil })
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "stockguard_lock_acquisitions_total" {
			continue
		}
		for _, m := range f.GetMetric() { // every value of the label, at 0 from the start
			fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// stockguard_lock_acquisitions_total handoff 0
	// stockguard_lock_acquisitions_total obtained 1
}

func ExampleKeys() {
	k := lock.Keys{Namespace: "sku"}
	fmt.Println(k.Lock("A-1"), k.Fence("A-1"), k.Channel())
	// Output: {sku:A-1}:lock {sku:A-1}:fence sku:lock:released
}

func ExampleOpen() {
	mr, err := miniredis.Run() // an embedded Redis; use your own server in real code
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()

	// The scheme picks the backend: redis:// is pkg/lock's own; a program
	// imports the others' packages (pglock, etcdlock, ...) to register theirs.
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

package redlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
	"github.com/stockguard/stockguard/pkg/lock/redlock"
)

// A Client over three independent Redis masters. Not run: it needs the servers.
func Example() {
	opts, err := redlock.ParseURL("redlock://redis-a:6379,redis-b:6379,redis-c:6379/0")
	if err != nil {
		panic(err)
	}
	clients := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		c := redis.NewClient(o)
		defer func() { _ = c.Close() }()
		clients[i] = c
	}
	backend, err := redlock.New(clients, &redlock.Options{Keys: redislease.Keys{Namespace: "sku"}})
	if err != nil {
		panic(err)
	}
	locks, err := lock.NewClient(backend, &lock.Options{TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer func() { _ = locks.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = locks.Do(ctx, []string{"A-1"}, func(_ context.Context, g *lock.Grant) error {
		// Write to the store with g.Token("A-1") as the fence: the store refuses
		// a token not above the largest it has accepted.
		fmt.Println("holding A-1 with token", g.Token("A-1"))
		return nil
	})
	if err != nil {
		fmt.Println(err) // wraps redlock.ErrNoQuorum when no majority answered: answer 503
	}
}

func ExampleParseURL() {
	opts, err := redlock.ParseURL("redlock://:secret@10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379/2")
	if err != nil {
		panic(err)
	}
	for _, o := range opts {
		fmt.Println(o.Addr, "db", o.DB, "read timeout", o.ReadTimeout, "context deadlines", o.ContextTimeoutEnabled)
	}
	_, err = redlock.ParseURL("redlock://10.0.0.1:6379,10.0.0.2:6379")
	fmt.Println(err)
	// Output:
	// 10.0.0.1:6379 db 2 read timeout 250ms context deadlines true
	// 10.0.0.2:6379 db 2 read timeout 250ms context deadlines true
	// 10.0.0.3:6379 db 2 read timeout 250ms context deadlines true
	// lock: invalid options: redlock URL names 2 host(s), Redlock needs at least 3
}

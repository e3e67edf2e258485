package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/ratelimit"
)

// A client allowed 2 requests at once and one every 2 seconds: the third in
// a row is refused, and each answer carries the draft's fields. (A miniredis
// with a stopped clock stands in for the replicas' Redis.)
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer func() { _ = rdb.Close() }()

	limits := ratelimit.New(rdb, ratelimit.Options{Namespace: "sku", Now: func() time.Time { return now }, Timeout: time.Second})
	lim := ratelimit.Limit{PerSecond: 0.5, Burst: 2}
	for range 3 {
		d := limits.Allow(context.Background(), "cli_01JEXAMPLE", lim)
		policy, current := ratelimit.Headers(d)
		fmt.Printf("allowed=%v Retry-After=%d %s: %s; %s: %s\n", d.Allowed, d.RetryAfterSeconds(),
			ratelimit.HeaderPolicy, policy, ratelimit.HeaderLimit, current)
	}
	// Output:
	// allowed=true Retry-After=0 RateLimit-Policy: "default";q=2;w=4; RateLimit: "default";r=1;t=2
	// allowed=true Retry-After=0 RateLimit-Policy: "default";q=2;w=4; RateLimit: "default";r=0;t=4
	// allowed=false Retry-After=2 RateLimit-Policy: "default";q=2;w=4; RateLimit: "default";r=0;t=2
}

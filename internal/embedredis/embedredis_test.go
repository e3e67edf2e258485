package embedredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/embedredis"
)

func TestKeysExpireInRealTime(t *testing.T) {
	addr, stop, err := embedredis.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(ctx, "k").Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 100ms TTL still exists after 5s")
		}
		time.Sleep(20 * time.Millisecond) // real time passing is what is tested
	}
}

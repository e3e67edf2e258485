package rediscache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func TestNewClientReadsEveryURLForm(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"redis://127.0.0.1:6379/2", "*redis.Client"},
		{"redis://s1:26379?master_name=main&addr=s2:26379", "*redis.Client"}, // a failover client is a *redis.Client
		{"redis://n1:6379?addr=n2:6379&addr=n3:6379", "*redis.ClusterClient"},
	} {
		c, err := rediscache.NewClient(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		got := "*redis.Client"
		if _, ok := c.(*redis.ClusterClient); ok {
			got = "*redis.ClusterClient"
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.url, got, tc.want)
		}
		_ = c.Close()
	}
	if _, err := rediscache.NewClient("redis://host?bogus=1"); err == nil {
		t.Error("an unknown parameter was accepted")
	}
}

func TestCacheRoundTrip(t *testing.T) {
	env := testenv.NewRedis(t)
	c := rediscache.NewCache(env.Client(t), redislease.Keys{Namespace: env.Namespace}, time.Minute)
	ctx := context.Background()
	if err := c.Set(ctx, map[string]int64{"A": 3, "B": 0}, orders.Fences{"A": 5, "B": 5}); err != nil {
		t.Fatal(err)
	}
	// A holder with an older token (one that lost its lock) cannot overwrite.
	if err := c.Set(ctx, map[string]int64{"A": 99}, orders.Fences{"A": 4}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, []string{"A", "B", "C"})
	if err != nil || len(got) != 2 || got["A"] != 3 || got["B"] != 0 {
		t.Fatalf("got %v %v", got, err)
	}
	if err := c.Delete(ctx, []string{"A"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, []string{"A"}); len(got) != 0 {
		t.Fatalf("deleted entry still there: %v", got)
	}
	if c.Key("A") != "{"+env.Namespace+":A}:stock" {
		t.Fatalf("key %q does not share the lock's hash tag", c.Key("A"))
	}
}

func TestCountersDecrementAllOrNothing(t *testing.T) {
	r := testenv.NewRedis(t)
	res := rediscache.NewCounters(r.Client(t), redislease.Keys{Namespace: r.Namespace}, time.Minute)
	ctx := context.Background()
	a, b := orders.Item{SKU: "A", Quantity: 2}, orders.Item{SKU: "B", Quantity: 1}
	missing, short, err := res.Take(ctx, []orders.Item{a, b})
	if err != nil || len(missing) != 2 || short != nil {
		t.Fatalf("unseeded: missing %v short %v %v", missing, short, err)
	}
	if err := res.Seed(ctx, map[string]int64{"A": 3, "B": 1}); err != nil {
		t.Fatal(err)
	}
	if err := res.Seed(ctx, map[string]int64{"A": 100}); err != nil { // seeds only what is missing
		t.Fatal(err)
	}
	if missing, short, err = res.Take(ctx, []orders.Item{a, b}); err != nil || missing != nil || short != nil {
		t.Fatalf("take: %v %v %v", missing, short, err)
	}
	if _, short, _ = res.Take(ctx, []orders.Item{a, {SKU: "C", Quantity: 1}}); short != nil {
		t.Fatalf("C is missing, not short: %v", short)
	}
	if _, short, err = res.Take(ctx, []orders.Item{{SKU: "A", Quantity: 1}, b}); err != nil || len(short) != 1 || short[0] != "B" {
		t.Fatalf("B is out: short %v %v", short, err)
	}
	// Nothing was taken by the refusals: A still has its last unit.
	if _, short, _ = res.Take(ctx, []orders.Item{{SKU: "A", Quantity: 1}}); short != nil {
		t.Fatalf("A's last unit: short %v", short)
	}
	if err := res.Drop(ctx, []string{"A"}); err != nil {
		t.Fatal(err)
	}
	if missing, _, _ = res.Take(ctx, []orders.Item{{SKU: "A", Quantity: 1}}); len(missing) != 1 {
		t.Fatalf("dropped counter still there: %v", missing)
	}
}

func TestPollingLockerExcludesAndTimesOut(t *testing.T) {
	r := testenv.NewRedis(t)
	keys := redislease.Keys{Namespace: r.Namespace}
	a := rediscache.NewPollingLocker(r.Client(t), keys, 5*time.Second, 2*time.Second)
	b := rediscache.NewPollingLocker(r.Client(t), keys, 5*time.Second, 100*time.Millisecond)
	ctx := context.Background()
	err := a.WithLocks(ctx, []string{"B", "A"}, func(ctx context.Context, g orders.Grant) error {
		if f := g.Fences(); f != nil {
			t.Errorf("lock-polling has no fencing tokens, got %v", f)
		}
		// Held by a: b waits its 100ms and gives up.
		err := b.WithLocks(ctx, []string{"A"}, func(context.Context, orders.Grant) error {
			t.Error("b ran while a held A")
			return nil
		})
		if !errors.Is(err, orders.ErrBusy) {
			t.Errorf("b: %v, want ErrBusy", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	if err := b.WithLocks(ctx, []string{"A", "B"}, func(context.Context, orders.Grant) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("after a released: %v ran=%v", err, ran)
	}
}

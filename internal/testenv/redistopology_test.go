package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/rediscache"
	"github.com/stockguard/stockguard/internal/testenv"
)

// The Sentinel group starts healthy: the sentinels agree on the master, a write
// through the group's REDIS_URL (as the service parses it) reaches the replica,
// and a killed master's replica is promoted.
func TestStartSentinelGroup(t *testing.T) {
	g := testenv.StartSentinelGroup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	addr, err := g.MasterAddr(ctx)
	if err != nil || addr != g.Master.Addr {
		t.Fatalf("sentinels name master %q (%v), want %s", addr, err, g.Master.Addr)
	}
	c, err := rediscache.NewClient(g.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	// WAIT covers its own connection's writes: SET and WAIT on one.
	conn := c.(*redis.Client).Conn()
	defer func() { _ = conn.Close() }()
	if err := conn.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through %s: %v", g.URL(), err)
	}
	if n, err := conn.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged (%v)", n, err)
	}
	if v, err := g.Replica.Client(t).Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the replica has %q (%v)", v, err)
	}

	// A failover: the replica promoted, the key still there through the URL.
	g.Master.Kill()
	if next := g.WaitFailover(t, g.Master, 30*time.Second); next != g.Replica {
		t.Fatalf("%s promoted, want %s", next, g.Replica)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after the failover, GET k through %s: %q (%v)", g.URL(), v, err)
	}
}

// The Redis Cluster starts healthy: keys of many slots are written and read
// through the cluster's REDIS_URL, spread over its three masters, and a killed
// master's slots are taken over by its replica.
func TestStartRedisCluster(t *testing.T) {
	rc := testenv.StartRedisCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := rediscache.NewClient(rc.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	masters := map[*testenv.RedisNode]bool{}
	for i := range 30 {
		key := fmt.Sprintf("{k%d}:x", i)
		if err := c.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s through %s: %v", key, rc.URL(), err)
		}
		if v, err := c.Get(ctx, key).Int(); err != nil || v != i {
			t.Fatalf("GET %s: %d (%v)", key, v, err)
		}
		m, err := rc.MasterOf(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		masters[m] = true
	}
	if len(masters) != 3 {
		t.Errorf("30 keys landed on %d masters, want 3", len(masters))
	}

	// A failover: the master of {k0} killed, its replica takes the slot over.
	old, err := rc.MasterOf(ctx, "{k0}:x")
	if err != nil {
		t.Fatal(err)
	}
	// Replication is asynchronous: the key is written again and WAITed for on
	// one connection, so that the replica has it before the kill.
	conn := old.Client(t).Conn()
	defer func() { _ = conn.Close() }()
	if err := conn.Set(ctx, "{k0}:x", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica of %s: %d (%v)", old, n, err)
	}
	old.Kill()
	next := rc.WaitFailover(t, old, "{k0}:x", 30*time.Second)
	if next == old {
		t.Fatalf("{k0} still on %s", old)
	}
	// Asked of the new master itself: how soon a cluster client finds it is the
	// client's business (the fault tests measure the service's).
	if v, err := next.Client(t).Get(ctx, "{k0}:x").Int(); err != nil || v != 0 {
		t.Fatalf("after the failover, GET {k0}:x on %s: %d (%v)", next, v, err)
	}
}

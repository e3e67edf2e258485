package redislease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// startReplicated starts a master and one replica that has caught up with it.
func startReplicated(t testing.TB) (master, replica *redisServer) {
	t.Helper()
	master, replica = startRedisServer(t), startRedisServer(t)
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer func() { _ = rc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mc := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer func() { _ = mc.Close() }()
	mustDo(t, mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()) // sync at once, not after 5 s
	host, port, _ := strings.Cut(master.Addr, ":")
	mustDo(t, rc.ReplicaOf(ctx, host, port).Err())
	// The replica says its link is up before the master counts it: after a
	// diskless sync the master waits for the replica's first acknowledgement, sent
	// once a second, before it puts the replica online and WAIT can count it.
	waitFor(ctx, t, func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	waitFor(ctx, t, func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "state=online")
	})
	return master, replica
}

// With Replicas, the grant comes only once the replica has the lock, so a
// failover to it would keep the lock; with the replica stopped, no grant comes
// (the lock is released) where without Replicas one would.
func TestReplicasAcknowledgeTheLock(t *testing.T) {
	master, replica := startReplicated(t)
	env := newRedisAt(t, master.Addr)
	m := lockprom.New("rep")
	// Generous bounds where the replica must answer, so that a busy machine does
	// not fail the test; a short one where it cannot (stopped).
	k := redislease.Keys{Namespace: env.Namespace}
	waiting := newClientWith(t, env.Client(t), redislease.Options{Keys: k, Replicas: 1, ReplicaTimeout: 5 * time.Second}, &lock.Options{TTL: 30 * time.Second})
	impatient := newClientWith(t, env.Client(t), redislease.Options{Keys: k, Replicas: 1, ReplicaTimeout: 200 * time.Millisecond}, &lock.Options{TTL: 3 * time.Second, Metrics: m})
	plain := newClient(t, env.Client(t), env.Namespace, &lock.Options{TTL: 3 * time.Second})
	onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer func() { _ = onReplica.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	err := waiting.Do(ctx, []string{"r"}, func(ctx context.Context, g *lock.Grant) error {
		if v, err := onReplica.Get(ctx, k.Lock("r")).Result(); err != nil || v == "" {
			t.Errorf("granted before the replica had the lock: %q %v", v, err)
		}
		if f, _ := onReplica.Get(ctx, k.Fence("r")).Int64(); f < g.Token("r") {
			t.Errorf("the replica's counter %d is below the granted token %d", f, g.Token("r"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	replica.Pause() // acknowledges nothing from now on
	defer replica.Resume()
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	err = impatient.Do(short, []string{"r"}, func(context.Context, *lock.Grant) error {
		t.Error("ran without the replica's acknowledgement")
		return nil
	})
	if !errors.Is(err, redislease.ErrNotReplicated) {
		t.Fatalf("with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if got := metricValue(t, m, "rep_lock_replica_waits_total", map[string]string{"result": "short"}); got != 1 {
		t.Fatalf("%v short waits recorded, want 1", got)
	}
	if n, _ := env.Client(t).Exists(ctx, k.Lock("r")).Result(); n != 0 {
		t.Fatal("a lock the replicas did not acknowledge was left held")
	}
	if err := plain.Do(ctx, []string{"r"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
		t.Fatalf("without Replicas the lock does not wait for the replica: %v", err)
	}
}

func TestReplicasOptionsAreChecked(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer func() { _ = rdb.Close() }()
	for _, o := range []struct {
		redislease.Options
		client lock.Options
	}{
		{Options: redislease.Options{Replicas: -1}},
		{Options: redislease.Options{Replicas: 1, ReplicaTimeout: time.Second}, client: lock.Options{OpTimeout: time.Second}},
	} {
		if _, err := redislease.NewClient(rdb, &o.Options, &o.client); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

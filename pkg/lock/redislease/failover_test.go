package redislease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// TestClusterFailoverRecovers kills, under load, the Cluster master that serves
// some resources' slots (and the release channel's) and checks that, on every
// one of three Clients with their own connections, Do on those resources
// succeeds again within cluster-node-timeout + 2s of its replica's promotion, and
// the Clients' release subscriptions are back by then.
func TestClusterFailoverRecovers(t *testing.T) {
	rc := startRedisCluster(t)
	ns := "t" + randomID()
	keys := redislease.Keys{Namespace: ns}
	const replicas = 3
	var rdbs []*redis.ClusterClient
	var cs []*lock.Client
	for range replicas {
		rdb := rc.Client(t)
		rdbs = append(rdbs, rdb)
		cs = append(cs, newClient(t, rdb, ns, nil))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	masterOf := func(key string) string {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		m, err := rdbs[0].MasterForKey(tctx, key)
		if err != nil {
			t.Fatalf("master of %s: %v", key, err)
		}
		return m.Options().Addr
	}
	// The victim serves the release channel's slot too, so the release
	// subscription dies with it.
	victim := masterOf(keys.Channel())
	var onVictim []string
	for i := 0; len(onVictim) < 4; i++ {
		if n := fmt.Sprintf("sku-%d", i); masterOf(keys.Lock(n)) == victim {
			onVictim = append(onVictim, n)
		}
	}
	// The load holds loaded's locks at any moment, so one may be held when the
	// victim dies and stay, replicated, until its lease ends. Recovery is
	// measured on probe, which only the warm-up and the measurement lock.
	loaded, probe := onVictim[:2], onVictim[2:]
	noop := func(context.Context, *lock.Grant) error { return nil }
	for i, c := range cs { // warm-up: connections, slot map and subscription in place
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Do(tctx, probe, noop)
		cancel()
		if err != nil {
			t.Fatalf("client %d: warm-up: %v", i, err)
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var loadOK, loadErr atomic.Int64
	for _, c := range cs {
		for _, names := range [][]string{loaded[:1], loaded[1:], loaded} {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					tctx, cancel := context.WithTimeout(ctx, time.Second)
					if err := c.Do(tctx, names, noop); err != nil {
						loadErr.Add(1)
						time.Sleep(10 * time.Millisecond) // an order that failed is not retried at once
					} else {
						loadOK.Add(1)
					}
					cancel()
				}
			})
		}
	}
	defer func() { close(stop); wg.Wait() }()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	waitFor(wctx, t, func() bool { return loadOK.Load() >= 10 }) // the load is under way
	wcancel()

	replica := rc.replicaOf(t, victim)
	rc.Node(t, victim).Kill()
	killed := time.Now()
	promoted := rc.waitPromoted(t, replica, 30*time.Second)
	t.Logf("replica %s promoted %s after the kill of %s", replica, promoted.Sub(killed).Round(time.Millisecond), victim)

	// Long enough to see how late recovery comes without a fix (go-redis's own
	// state reload, ClusterStateReloadInterval, 60s by default), not how long
	// the test may take when it passes.
	const patience = 75 * time.Second
	limit := clusterNodeTimeout + 2*time.Second
	recovered := make([]time.Duration, len(cs))
	lastErr := make([]error, len(cs))
	var mwg sync.WaitGroup
	for i, c := range cs {
		mwg.Go(func() {
			recovered[i] = -1
			for time.Since(promoted) < patience {
				tctx, cancel := context.WithTimeout(ctx, time.Second)
				err := c.Do(tctx, probe, noop)
				cancel()
				if err == nil {
					recovered[i] = time.Since(promoted)
					return
				}
				lastErr[i] = err
				time.Sleep(10 * time.Millisecond) // as a client retrying its order
			}
		})
	}
	mwg.Wait()
	for i, d := range recovered {
		switch {
		case d < 0:
			t.Errorf("client %d: Do on %v still failing %s after the promotion: %v", i, probe, patience, lastErr[i])
		case d > limit:
			t.Errorf("client %d: Do on %v succeeded %s after the promotion, want within %s (cluster-node-timeout + 2s); failed before with: %v",
				i, probe, d.Round(time.Millisecond), limit, lastErr[i])
		default:
			t.Logf("client %d: Do on %v succeeded %s after the promotion", i, probe, d.Round(time.Millisecond))
		}
	}

	// The release subscriptions, which were on the victim, are back: on the
	// promoted replica, the channel's slot's master now.
	subscribed := func() bool {
		n, err := nodeClient(replica, func(ctx context.Context, c *redis.Client) (map[string]int64, error) {
			return c.PubSubNumSub(ctx, keys.Channel()).Result()
		})
		return err == nil && n[keys.Channel()] == replicas
	}
	sctx, scancel := context.WithDeadline(ctx, promoted.Add(limit))
	defer scancel()
	waitFor(sctx, t, subscribed)

	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
	t.Logf("load: %d grants, %d errors", loadOK.Load(), loadErr.Load())
}

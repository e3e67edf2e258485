//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// Faults of replicated Redis: the master of a Sentinel group killed, stopped, or
// killed after its replica was cut off from replication (so that a stale
// replica is promoted), and the master of a Redis Cluster that serves the hot
// SKU killed. Each runs under load on the strategies lock-batch and lock, and
// after it the usual checks (verify) and three more: no fencing token committed
// by two grants (fencesPerGrant), no order refused on any replica while the
// database had the stock (acceptedEverywhere), and the time until orders are
// decided again, within a bound.

// replicatedStrategies are the strategies every replicated-Redis fault runs on.
var replicatedStrategies = []string{"lock-batch", "lock"}

// afterPromotionBound is how long after the topology names the new master the
// replicas may take to decide again: a lock replicated before the fault outlives
// its dead holder on the new master for up to a lease, plus the waiters' poll and
// a loaded machine (recoverySlack). Both Sentinel (down-after 1s, then a vote and
// REPLICAOF NO ONE: 2.3s measured here) and Cluster (cluster-node-timeout 2s,
// then the replica's election: 4.4s measured here) have then done their part;
// the rest is the service's.
const afterPromotionBound = lease + recoverySlack

// recoveryWait bounds the wait for a decision after a fault: long enough to
// measure a slow recovery (a Redis Cluster failover took about 50s before its
// fix), short of a hang.
const recoveryWait = 90 * time.Second

// failoverFigures is what a fault of the Redis master did.
type failoverFigures struct {
	kind            string
	holder          *replica // caught inside its write at the fault
	old, promoted   *testenv.RedisNode
	promotedAfter   time.Duration // from the fault to the topology naming the new master
	recovery        time.Duration // from the fault to the first decision
	grantsWhileHeld float64       // grants to the others while the holder had not counted its loss
	grantsCounted   bool          // false under a load of several SKUs: the metric counts their grants too
	noticed         bool          // the holder counted a lost lease or a refused write
	stopped         time.Duration // SIGSTOP's length (stop only)
	gapAfterCont    time.Duration // the longest time without a decision in 3s after SIGCONT (stop only)
	probes          int           // orders the test sent itself after the load had ended, to see recovery
	dbBefore        int           // the overlap sampler's count at the fault
}

// afterPromotion is the time from the promotion to the first decision.
func (f failoverFigures) afterPromotion() time.Duration { return f.recovery - f.promotedAfter }

func (f failoverFigures) String() string {
	s := fmt.Sprintf("%s: master %s %s while %s was inside its write; %s promoted %dms after; first decision %dms after the fault (%dms after the promotion); %g grants to the others before the holder noticed (noticed: %v)",
		f.kind, f.old, map[string]string{"kill": "killed", "stop": "stopped", "stale": "killed (its replica cut off)", "cluster-kill": "killed"}[f.kind],
		f.holder.name, f.promoted, f.promotedAfter.Milliseconds(), f.recovery.Milliseconds(), f.afterPromotion().Milliseconds(),
		f.grantsWhileHeld, f.noticed)
	if !f.grantsCounted {
		s = strings.Replace(s, fmt.Sprintf("%g grants to the others before the holder noticed", f.grantsWhileHeld),
			"grants to the others not counted (the other SKUs' grants are in the same metric)", 1)
	}
	if f.kind == "stop" {
		s += fmt.Sprintf("; stopped %dms, longest pause in decisions in 3s after SIGCONT %dms", f.stopped.Milliseconds(), f.gapAfterCont.Milliseconds())
	}
	if f.probes > 0 {
		s += fmt.Sprintf("; %d probe orders sent after the load ended", f.probes)
	}
	return s
}

// watchPromotion polls (every 20ms, for 60s at most) in the background until
// promoted names a new master, and returns a function that waits for it and
// says when it was first seen.
func watchPromotion(promoted func(context.Context) *testenv.RedisNode) func() (*testenv.RedisNode, time.Time) {
	var (
		node *testenv.RedisNode
		at   time.Time
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n := promoted(ctx)
			cancel()
			if n != nil {
				node, at = n, time.Now()
				return
			}
			hold(20 * time.Millisecond) // polling the topology, with a deadline
		}
	}()
	return func() (*testenv.RedisNode, time.Time) { <-done; return node, at }
}

// recoveredWithin waits (at most within) for a decision after t0 by a replica
// accepted by keep and returns how long after t0 it came. Once the load's
// scenarios have ended it sends orders of one unit itself, one every 200ms,
// through the balancer, so that a recovery slower than the load is measured,
// not missed; it returns how many it sent. They are of a SKU of their own
// (probeSKU: in the hot SKU's Cluster slot; its decisions count as the hot
// SKU's do), so that the load generator's audit of its SKUs is not disturbed.
func (c *cluster) recoveredWithin(l *loadRun, t0 time.Time, keep func(int) bool, within time.Duration) (time.Duration, int) {
	probes := 0
	var first time.Time
	deadline := time.Now().Add(within)
	for {
		var ok bool
		if first, ok = c.lb.firstDecision(t0, keep); ok {
			return first.Sub(t0), probes
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no decision within %s of the fault (%d probe orders sent)", within, probes)
		}
		if time.Now().After(l.ends) {
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout+time.Second)
			_, _ = post(ctx, c.lb.url+"/v1/orders", orderBody(c.probe, 1), nil)
			cancel()
			probes++
			hold(200 * time.Millisecond) // the probes' pace, within the deadline
			continue
		}
		hold(10 * time.Millisecond) // polling the balancer's decisions, with a deadline
	}
}

// failMaster injects a fault into the master of c's Redis topology while the
// hot SKU's lock holder is caught inside its write: "kill" (SIGKILL), "stop"
// (SIGSTOP for stopFor, then SIGCONT), "stale" (SIGKILL, the replica having been
// cut off by the caller) on a Sentinel group; "cluster-kill" (SIGKILL of the
// master serving the hot SKU's slot) on a Redis Cluster. As in restartRedis,
// the holder's write is kept waiting until it counted its loss, or two leases.
func (c *cluster) failMaster(l *loadRun, kind string, stopFor time.Duration) failoverFigures {
	t := c.t
	f := failoverFigures{kind: kind, grantsCounted: !l.spread}
	var promoted func() (*testenv.RedisNode, time.Time)
	switch {
	case c.group != nil:
		f.old = c.group.Master
		// The first sentinel to name another master: the one that ran the
		// failover, before the others learn of it.
		promoted = watchPromotion(func(ctx context.Context) *testenv.RedisNode {
			for _, s := range c.group.Sentinels {
				sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
				a, err := sc.GetMasterAddrByName(ctx, c.group.MasterName).Result()
				_ = sc.Close()
				if err == nil && len(a) == 2 && a[0]+":"+a[1] != f.old.Addr {
					return c.group.Node(a[0] + ":" + a[1])
				}
			}
			return nil
		})
	case c.rc != nil:
		key := redislease.Keys{Namespace: c.ns}.Lock(c.hot)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		old, err := c.rc.MasterOf(ctx, key)
		cancel()
		if err != nil {
			t.Fatalf("the master of %s: %v", key, err)
		}
		f.old = old
		promoted = watchPromotion(func(ctx context.Context) *testenv.RedisNode {
			m, err := c.rc.MasterOf(ctx, key)
			if err != nil || m == old || !m.Alive() {
				return nil
			}
			return m
		})
	default:
		t.Fatal("failMaster needs a Sentinel group or a Redis Cluster")
	}

	x, release := c.catchWriter(c.hot, anyReplica)
	f.holder = x
	others := c.othersThan(x)
	xBefore, _ := c.scrape(x)
	grantsBefore := c.sumOf(others, mGrants)
	f.dbBefore, _ = c.overlap.seen()
	t0 := time.Now()
	if kind == "stop" {
		if err := f.old.Stop(); err != nil {
			release()
			t.Fatal(err)
		}
	} else {
		f.old.Kill()
	}
	for deadline := time.Now().Add(2 * lease); time.Now().Before(deadline); {
		g := c.sumOf(others, mGrants)
		m, err := c.scrape(x)
		if err == nil && (m.sum(mLeasesLost) > xBefore.sum(mLeasesLost) || m.sum(mFenceRejections) > xBefore.sum(mFenceRejections)) {
			f.noticed = true
			break
		}
		f.grantsWhileHeld = g - grantsBefore
		hold(20 * time.Millisecond) // polling the metrics, with a deadline
	}
	release()
	if kind == "stop" {
		hold(stopFor - time.Since(t0))
		if err := f.old.Cont(); err != nil {
			t.Fatal(err)
		}
		f.stopped = time.Since(t0)
	}
	f.recovery, f.probes = c.recoveredWithin(l, t0, anyReplica, recoveryWait)
	var at time.Time
	f.promoted, at = promoted()
	if f.promoted == nil {
		t.Fatalf("%s: no new master within 60s of the fault", kind)
	}
	f.promotedAfter = at.Sub(t0)
	if kind == "stop" {
		t1 := t0.Add(f.stopped)
		waitFor(t, 10*time.Second, "3s after SIGCONT", func() bool { return time.Since(t1) > 3*time.Second })
		f.gapAfterCont = c.lb.longestGap(t1, t1.Add(3*time.Second), anyReplica)
	}
	return f
}

// checkFailover fills r from f and the run, and fails the test when the
// recovery broke its bound. promotionBound is the topology's own part: a
// slower promotion is reported as such, not blamed on the service.
func (c *cluster) checkFailover(r *result, f failoverFigures, promotionBound time.Duration) {
	t := c.t
	r.recovered(f.recovery)
	samples, pairs := c.overlap.seen()
	r.Overlap = fmt.Sprintf("%g grants to others before the holder noticed its loss; %d DB samples of a write waiting on another replica's after the fault (%s)",
		f.grantsWhileHeld, samples-f.dbBefore, pairs)
	if !f.grantsCounted {
		r.Overlap = fmt.Sprintf("%d DB samples of a write waiting on another replica's after the fault (%s)", samples-f.dbBefore, pairs)
	}
	if f.promotedAfter > promotionBound {
		t.Errorf("the topology took %s to promote a new master (bound %s): the figures below are of a slow failover", f.promotedAfter, promotionBound)
	}
	if f.afterPromotion() > afterPromotionBound {
		t.Errorf("orders were decided again %s after the new master was promoted (%s after the fault); the bound is %s (a lease + %s)",
			f.afterPromotion(), f.recovery, afterPromotionBound, recoverySlack)
	}
}

// acceptedEverywhere checks that no replica refuses an order while the database
// has the stock: after the run, every SKU with stock gets an order of one unit
// posted straight to every replica (not through the balancer). A 503 (busy,
// Redis still settling) is asked again for 10s; a 409 is a refusal. It returns
// the refusals.
func (c *cluster) acceptedEverywhere(ctx context.Context) []string {
	t := c.t
	var skus []string
	if err := c.gdb.WithContext(ctx).Table("skus").Where("available > 0").Order("sku").Pluck("sku", &skus).Error; err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, sku := range skus {
		for _, r := range c.all() {
			var rep reply
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; {
				rep, err = post(ctx, r.url+"/v1/orders", orderBody(sku, 1), nil)
				if (err == nil && rep.status < 500) || time.Now().After(deadline) {
					break
				}
				hold(100 * time.Millisecond) // a replica still settling: ask again, with a deadline
			}
			switch {
			case err == nil && rep.status == http.StatusCreated:
			case err == nil && rep.status == http.StatusConflict:
				refused = append(refused, fmt.Sprintf("%s refused %s: %s", r, sku, bytes.TrimSpace(rep.body)))
			default:
				t.Errorf("POST /v1/orders of %s to %s: %d %v %s", sku, r, rep.status, err, rep.body)
			}
		}
	}
	if len(refused) > 0 {
		t.Errorf("I4: %d orders refused while the database had the stock: %s", len(refused), strings.Join(refused, "; "))
	}
	return refused
}

// probeSKU is the SKU of recoveredWithin's probes: one whose keys are in the
// hot SKU's Redis Cluster slot, so that a probe waits for what the hot SKU
// waits for (the load's hot SKU is hot<id>-0).
func (c *cluster) probeSKU() string {
	keys := redislease.Keys{Namespace: c.ns}
	want := keys.Slot("hot" + c.id + "-0")
	for i := 0; ; i++ {
		if sku := fmt.Sprintf("probe%s-%d", c.id, i); keys.Slot(sku) == want {
			return sku
		}
	}
}

func orderBody(sku string, qty int) string {
	b, _ := json.Marshal(map[string]any{"items": []map[string]any{{"sku": sku, "quantity": qty}}})
	return string(b)
}

// replicatedRun is one replicated-Redis fault test on one strategy.
type replicatedRun struct {
	r    *result
	c    *cluster
	load *loadRun
}

// startReplicated records the row, starts the cluster on the topology and the
// load, and waits for traffic.
func startReplicated(t *testing.T, fault string, o clusterOptions, d time.Duration, spreadVUs int) *replicatedRun {
	run := &replicatedRun{r: &result{Fault: fault}}
	record(t, run.r)
	run.r.Strategy = o.strategy
	o.replicas = 3
	run.c = newCluster(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run.c.probe = run.c.probeSKU()
	mustStatus(ctx, t, run.c.lb.url+"/v1/skus/"+run.c.probe+"/restock", fmt.Sprintf(`{"quantity":%d}`, hotStock), http.StatusCreated, http.StatusOK)
	if o.redisCluster {
		key := redislease.Keys{Namespace: run.c.ns}.Lock(run.c.probe)
		want, err := run.c.rdb.ClusterKeySlot(ctx, redislease.Keys{Namespace: run.c.ns}.Lock("hot"+run.c.id+"-0")).Result()
		got, err2 := run.c.rdb.ClusterKeySlot(ctx, key).Result()
		if err != nil || err2 != nil || got != want {
			t.Fatalf("the probe SKU's slot %d (%v), the hot SKU's %d (%v)", got, err2, want, err)
		}
	}
	run.c.lb.mu.Lock()
	run.c.lb.probe = run.c.probe
	run.c.lb.mu.Unlock()
	run.load = run.c.startLoadSpread(d, loadVUs, spreadVUs)
	run.load.waitTraffic(200)
	return run
}

// finish waits for the load, then runs every check: verify (I1-I4), the
// fences per grant, orders accepted on every replica, and the failover's
// bound.
func (run *replicatedRun) finish(f failoverFigures, promotionBound time.Duration, extra string) {
	c, r := run.c, run.r
	s := run.load.wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Before verify, so that the cache is checked after these orders too, and
	// the audits count them.
	refused := c.acceptedEverywhere(ctx)
	c.verify(r, s)
	c.checkFailover(r, f, promotionBound)
	r.Detail = fmt.Sprintf("%s; %d transactions reused a committed fence, %d went below one; %d refusals while the database had the stock",
		f, r.FencesReused, r.FencesDown, len(refused))
	if extra != "" {
		r.Detail += "; " + extra
	}
}

// sentinelPromotionBound: down-after-milliseconds (1s), then the sentinels'
// vote and REPLICAOF NO ONE (about 1.3s measured), with room for a loaded
// machine.
func sentinelPromotionBound(g *testenv.SentinelGroup) time.Duration {
	return g.DownAfter + 4*time.Second
}

// The master of a Sentinel group killed (SIGKILL) under load, with the hot
// SKU's lock holder inside its write; the replica is promoted. Run with
// STOCKGUARD_LOCK_REPLICAS=0 and =1 (WAIT for one replica after each obtain):
// the overlap figures of the two say what waiting for the replica changes. With
// =1 the group has two replicas, so that the new master has one to wait for
// (with one, no lock can be had until the old master is back: the option's
// documented price).
func TestSentinelMasterKilled(t *testing.T) {
	for _, which := range replicatedStrategies {
		for _, n := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/lock-replicas=%d", which, n), func(t *testing.T) {
				run := startReplicated(t, fmt.Sprintf("sentinel-kill %s lock-replicas=%d", which, n), clusterOptions{
					sentinel: true, sentinelReplicas: 1 + n, strategy: which, env: []string{fmt.Sprintf("STOCKGUARD_LOCK_REPLICAS=%d", n)},
				}, 15*time.Second, 0)
				f := run.c.failMaster(run.load, "kill", 0)
				run.finish(f, sentinelPromotionBound(run.c.group), "")
			})
		}
	}
}

// The master of a Sentinel group stopped (SIGSTOP) for 5s under load, then
// continued (SIGCONT): the sentinels promote the replica meanwhile, and the old
// master, back, is a master until they turn it into a replica.
func TestSentinelMasterStopped(t *testing.T) {
	for _, which := range replicatedStrategies {
		t.Run(which, func(t *testing.T) {
			run := startReplicated(t, "sentinel-stop "+which, clusterOptions{sentinel: true, strategy: which}, 18*time.Second, 0)
			f := run.c.failMaster(run.load, "stop", 5*time.Second)
			run.finish(f, sentinelPromotionBound(run.c.group), "")
		})
	}
}

// The master of a Sentinel group killed after its replica was cut off from
// replication (testenv.SentinelGroup.CutReplica): a restock and orders on a SKU
// of the test's own, and the load's orders, reach the master alone; then the
// master is killed and the stale replica promoted. Its stock cache entry of that
// SKU says sold out while the database has stock, and its fence counters lag
// the tokens the database committed. Orders must still be decided right:
// nothing refused for want of stock the database has, no fencing token
// committed twice.
func TestSentinelStaleReplicaPromoted(t *testing.T) {
	for _, which := range replicatedStrategies {
		t.Run(which, func(t *testing.T) {
			run := startReplicated(t, "sentinel-stale "+which, clusterOptions{sentinel: true, strategy: which}, 15*time.Second, 0)
			c := run.c
			g := c.group
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			master, replica := g.Master.Client(t), g.Replica.Client(t)

			// A SKU sold out, its cache entry (if the strategy keeps one) on both nodes.
			sku := "restock" + c.id
			cacheKey := redislease.Keys{Namespace: c.ns}.Tag(sku) + ":stock"
			mustStatus(ctx, t, c.lb.url+"/v1/skus/"+sku+"/restock", `{"quantity":2}`, http.StatusCreated, http.StatusOK)
			mustStatus(ctx, t, c.lb.url+"/v1/orders", orderBody(sku, 2), http.StatusCreated)
			mustStatus(ctx, t, c.lb.url+"/v1/orders", orderBody(sku, 1), http.StatusConflict)
			cached, err := master.Get(ctx, cacheKey).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the replica in step with the master's cache of "+sku, func() bool {
				v, err := replica.Get(ctx, cacheKey).Result()
				return v == cached && (err == nil || errors.Is(err, redis.Nil))
			})

			// Writes the replica never sees.
			g.CutReplica(t)
			mustStatus(ctx, t, c.lb.url+"/v1/skus/"+sku+"/restock", `{"quantity":5}`, http.StatusOK)
			mustStatus(ctx, t, c.lb.url+"/v1/orders", orderBody(sku, 2), http.StatusCreated)
			marker := "{" + c.ns + "}:after-cut"
			if err := master.Set(ctx, marker, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			grantsBefore := c.total(mGrants)
			hold(time.Second) // a second of the load's orders on the master alone: the length of the fault's preparation
			grantsCut := c.total(mGrants) - grantsBefore

			f := run.c.failMaster(run.load, "stale", 0)
			if f.promoted != g.Replica {
				t.Fatalf("%s was promoted, not the cut-off replica %s", f.promoted, g.Replica)
			}
			if n, err := replica.Exists(ctx, marker).Result(); err != nil || n != 0 {
				t.Fatalf("the promoted replica has the key written after the cut (%d, %v): it was not stale", n, err)
			}
			staleCache, _ := replica.Get(ctx, cacheKey).Result()
			run.finish(f, sentinelPromotionBound(g), fmt.Sprintf("%g grants on the master alone while the replica was cut off; %s: cache %q on the promoted replica at the promotion, the database had 3 more units",
				grantsCut, sku, staleCache))
		})
	}
}

// The master of a six-node Redis Cluster that serves the hot SKU's slot killed
// (SIGKILL) under load, with the hot SKU's lock holder inside its write; its
// replica is promoted. A second scenario orders over eight SKUs of their own,
// half the orders with two or three of them, so mostly across slots and
// masters.
func TestRedisClusterMasterKilled(t *testing.T) {
	for _, which := range replicatedStrategies {
		t.Run(which, func(t *testing.T) {
			run := startReplicated(t, "cluster-kill "+which, clusterOptions{redisCluster: true, strategy: which}, 18*time.Second, 4)
			f := run.c.failMaster(run.load, "cluster-kill", 0)
			// cluster-node-timeout to suspect the master, the failure's spread and
			// the replica's election (0.5-1s and its rank), with room for a loaded
			// machine.
			run.finish(f, 2*run.c.rc.NodeTimeout+2*time.Second, "")
		})
	}
}

// mustStatus posts body to rawURL with the admin token and fails the test
// unless the answer is one of want. It is for the test's own preparations, not
// for what a fault is measured on: a 5xx (the replicas' first requests to a
// topology just started can time out) is asked again, for 15s at most.
func mustStatus(ctx context.Context, t *testing.T, rawURL, body string, want ...int) {
	t.Helper()
	var rep reply
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; {
		rep, err = post(ctx, rawURL, body, map[string]string{"Authorization": "Bearer " + adminToken})
		if (err == nil && rep.status < 500) || time.Now().After(deadline) {
			break
		}
		hold(100 * time.Millisecond) // asking again, with a deadline
	}
	if err == nil {
		for _, w := range want {
			if rep.status == w {
				return
			}
		}
	}
	t.Fatalf("POST %s: %d %v %s (want %v)", rawURL, rep.status, err, rep.body, want)
}

//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The etcd lock service (STOCKGUARD_LOCK_URL=etcd://...) under the faults of
// its design: its one member stopped, killed and restarted, and a lock holder
// stopped past its etcd lease. verify checks I1-I4: 0 units oversold, 0
// acknowledged orders lost.

// etcdLease is how long an etcd lease of the replicas' lock lasts: the lock's
// TTL (lease, 1s) rounded up to etcd's minimum, 2s with the default election
// timeout, plus the lessor's expiry check (every 500ms). A dead holder blocks
// its SKU that long, not a lease.
const etcdLease = 2*time.Second + 500*time.Millisecond

// The etcd member stopped (SIGSTOP) under load, past every lease, then
// continued. While it is stopped no lock can be obtained or renewed: holders'
// work is cancelled within their lease and, once that has passed, no order is
// decided. Continued, it ends the leases whose time has passed and the SKU is
// decided again within an etcd lease.
func TestEtcdLockServerPaused(t *testing.T) {
	r := &result{Fault: "etcd-pause"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "etcd"})
	load := c.startLoad(16*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	stopped := time.Now()
	c.etcd.Pause()
	paused := 2 * etcdLease
	hold(paused) // the window watched for decisions, of the load's own traffic
	resumed := time.Now()
	c.etcd.Resume()
	// Writes already under a lock may finish within their lease; none after.
	settled := stopped.Add(lease + recoverySlack)
	if at, ok := c.lb.firstDecision(settled, anyReplica); ok && at.Before(resumed) {
		t.Errorf("an order was decided %s after etcd was stopped (a lease ended by then): no etcd, no lock", at.Sub(stopped))
	}
	recovery := c.recoveredAfter(resumed, anyReplica)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.wait())
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("etcd stopped %dms (SIGSTOP): no decision from %s after the stop until it continued, %d 5xx answers; first decision %dms after it continued",
		resumed.Sub(stopped).Milliseconds(), lease+recoverySlack, errs, recovery.Milliseconds())
	if recovery > etcdLease+recoverySlack {
		t.Errorf("orders were decided again only %s after etcd continued", recovery)
	}
}

// The etcd member killed (SIGKILL) under load and started again on the same
// data directory. What it committed survives: the lock keys and their leases
// (which the restarted member gives their full TTL again) and the revision, so
// fencing tokens keep growing (the store's fence checks). Orders are decided
// again within an etcd lease of the restart.
func TestEtcdLockServerRestarted(t *testing.T) {
	r := &result{Fault: "etcd-restart"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "etcd"})
	load := c.startLoad(14*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.etcd.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	recovery := c.recoveredAfter(restarted, anyReplica)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.wait())
	r.recovered(restarted.Sub(killed) + recovery)
	r.Detail = fmt.Sprintf("etcd killed and started again on its data: answering %dms after the kill; first decision %dms after that; %d 5xx answers",
		restarted.Sub(killed).Milliseconds(), recovery.Milliseconds(), errs)
	if recovery > etcdLease+recoverySlack {
		t.Errorf("orders were decided again only %s after etcd came back", recovery)
	}
}

// A lock holder (a replica) stopped with SIGSTOP inside its write, past its
// etcd lease: etcd ends the lease, another replica takes the lock with a
// higher token, and the stopped one's write is refused by the fence or its
// loss noticed when it runs again.
func TestEtcdPausedLockHolder(t *testing.T) {
	r := &result{Fault: "etcd-pause-holder"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "etcd"})
	load := c.startLoad(15*time.Second, loadVUs)
	load.waitTraffic(200)

	f := c.pauseHolder(nil, 2*etcdLease)

	c.verify(r, load.wait())
	r.recovered(f.recovery)
	r.Detail = f.String()
	if f.grantsDuring == 0 {
		t.Errorf("no other replica was granted the lock while %s was stopped for %s: the pause did not break the lock", f.x, f.paused)
	}
	if !f.noticed {
		t.Errorf("%s counted no lost lease and no refused write after being stopped past its lease", f.x)
	}
	if f.recovery > etcdLease+recoverySlack {
		t.Errorf("the SKU was blocked %s by a holder stopped inside its write; the etcd lease is %s (+%s)", f.recovery, etcdLease, recoverySlack)
	}
}

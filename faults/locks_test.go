//go:build faults

package faults

import (
	"fmt"
	"testing"
	"time"
)

// The lock services other than one Redis (STOCKGUARD_LOCK_URL), under the
// faults their designs answer to. verify checks I1-I4 as for every fault: 0
// units oversold, 0 acknowledged orders lost.

// One of Redlock's three masters killed (SIGKILL) under load: a majority is
// left, so orders go on; the SKU is decided again within a lease (the lock
// the dead master held for a holder is gone; the others still hold it).
func TestRedlockOneMasterKilled(t *testing.T) {
	r := &result{Fault: "redlock-kill-1"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "redlock"})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	t0 := time.Now()
	c.redlock.Nodes[0].Kill()
	recovery := c.recoveredAfter(t0, anyReplica)
	// Orders go on: 200 more decisions with two masters.
	load.waitTraffic(c.lb.decisionCount(anyReplica) + 200)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.finish(0)) // its 200 decisions after the fault are in
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("master %s of 3 killed; first decision %dms after; %d 5xx answers after the kill; orders went on with two",
		c.redlock.Nodes[0].Addr, recovery.Milliseconds(), errs)
	if recovery > lease+recoverySlack {
		t.Errorf("orders were decided again only %s after one master of three died", recovery)
	}
}

// Two of Redlock's three masters killed under load: no majority, so no lock:
// once the leases held then have ended, no order is decided and the replicas
// answer 503; nothing is oversold. Started again (empty), the masters take
// locks again, with tokens above the old ones (the store's fence checks).
func TestRedlockTwoMastersKilled(t *testing.T) {
	r := &result{Fault: "redlock-kill-2"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "redlock"})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	killed := time.Now()
	c.redlock.Nodes[0].Kill()
	c.redlock.Nodes[1].Kill()
	// Writes already under a lock may finish within their lease; none after.
	settled := killed.Add(lease + recoverySlack)
	hold(time.Until(settled) + 3*time.Second) // the window watched for decisions, of the load's own traffic
	if at, ok := c.lb.firstDecision(settled, anyReplica); ok {
		t.Errorf("an order was decided %s after two of three masters died (a lease ended by then): no majority, no lock", at.Sub(killed))
	}
	errs := c.lb.errors5xx(anyReplica) - errsBefore
	if errs == 0 {
		t.Errorf("no 503 while two of three masters were dead")
	}

	restarted := time.Now()
	c.redlock.Nodes[0].Restart(t)
	c.redlock.Nodes[1].Restart(t)
	recovery := c.recoveredAfter(restarted, anyReplica)

	c.verify(r, load.finish(afterFault))
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("2 of 3 masters killed: no decision from %s after (a lease and slack) for 3s, %d 5xx answers; restarted empty, first decision %dms after",
		lease+recoverySlack, errs, recovery.Milliseconds())
	if recovery > lease+recoverySlack {
		t.Errorf("orders were decided again only %s after the masters came back", recovery)
	}
}

// Every PostgreSQL session of every replica's lock service (lock service
// postgres) terminated, three times under load. The locks held then are
// renewed on new sessions or lost with their work cancelled; orders go on.
func TestPostgresLockSessionsTerminated(t *testing.T) {
	r := &result{Fault: "pglock-terminate"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "postgres"})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	ended := 0
	var worst time.Duration
	for range 3 {
		t0 := time.Now()
		for _, x := range c.all() {
			ended += c.terminateApp(lockApp(x.name))
		}
		worst = max(worst, c.recoveredAfter(t0, anyReplica))
		load.waitTraffic(c.lb.decisionCount(anyReplica) + 100)
	}

	c.verify(r, load.finish(0)) // its decisions after each fault are in
	r.recovered(worst)
	r.Detail = fmt.Sprintf("3 times, every lock session of every replica ended (%d sessions); decided again at most %dms after",
		ended, worst.Milliseconds())
	if ended < 3 {
		t.Errorf("only %d lock sessions ended: the replicas' lock sessions were not found", ended)
	}
	if worst > lease+recoverySlack {
		t.Errorf("orders were decided again only %s after the lock sessions ended", worst)
	}
}

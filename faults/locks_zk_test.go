//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// The ZooKeeper lock service (zklock) under the faults its design answers to.
// Each replica has one session, of zkSession.

// zkSession is the replicas' session timeout: zklock's default, which the
// private server grants (at most 20 ticks of lockserver.ZooKeeperTick).
const zkSession = zklock.DefaultSessionTimeout

// zkReconnect is what a replica's ZooKeeper client may take, once the server
// answers again, to be connected: it retries a failed server list after 1s.
const zkReconnect = 2 * time.Second

// The ZooKeeper server stopped (SIGSTOP) under load for longer than the
// replicas' sessions and leases, then continued. While it is stopped no lock
// can be obtained or renewed: once the leases held then have ended, nothing is
// decided. Continued, it ends the leases (on its clock, and the sessions the
// clients could not keep alive) and orders are decided again.
func TestZooKeeperLockServerPaused(t *testing.T) {
	r := &result{Fault: "zk-pause"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "zk"})
	load := c.startLoad(18*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	stopped := time.Now()
	c.zk.Pause()
	paused := zkSession + time.Second
	hold(paused) // the fault's length, watched by the load's own traffic
	settled := stopped.Add(lease + recoverySlack)
	at, decidedPaused := c.lb.firstDecision(settled, anyReplica)
	resumed := time.Now()
	c.zk.Resume()
	if decidedPaused && at.Before(resumed) {
		t.Errorf("an order was decided %s after ZooKeeper stopped (a lease ended by then)", at.Sub(stopped))
	}
	errs := c.lb.errors5xx(anyReplica) - errsBefore
	recovery := c.recoveredAfter(resumed, anyReplica)

	c.verify(r, load.wait())
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("ZooKeeper stopped (SIGSTOP) %dms, past the %s sessions and %s leases; no decision from %s after the stop; %d 5xx answers; first decision %dms after it continued",
		resumed.Sub(stopped).Milliseconds(), zkSession, lease, lease+recoverySlack, errs, recovery.Milliseconds())
	if recovery > zkReconnect+lease+recoverySlack {
		t.Errorf("orders were decided again only %s after ZooKeeper continued", recovery)
	}
}

// The ZooKeeper server killed (SIGKILL) under load and started again on its
// data directory after two leases. Its transaction log keeps the resource
// nodes (so the fencing tokens' floors and zxids, which keep growing) and the
// sessions, which the replicas resume if they reconnect within the session
// timeout; the lease nodes whose TTL ended meanwhile are taken over.
func TestZooKeeperLockServerRestarted(t *testing.T) {
	r := &result{Fault: "zk-restart"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "zk"})
	load := c.startLoad(16*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(anyReplica)
	killed := time.Now()
	c.zk.Kill()
	hold(2 * lease) // the outage, watched by the load's own traffic
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	restarted := time.Now()
	if err := c.zk.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	up := time.Since(restarted)
	errs := c.lb.errors5xx(anyReplica) - errsBefore
	recovery := c.recoveredAfter(restarted, anyReplica)

	c.verify(r, load.wait())
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("ZooKeeper killed, restarted on its data after %dms (answering %dms later); %d 5xx answers; first decision %dms after the restart",
		restarted.Sub(killed).Milliseconds(), up.Milliseconds(), errs, recovery.Milliseconds())
	if recovery > up+zkReconnect+lease+recoverySlack {
		t.Errorf("orders were decided again only %s after ZooKeeper was restarted (answering after %s)", recovery, up)
	}
}

// A lock holder (a replica) stopped inside its write for longer than its
// session: its lease ends by its TTL on the server's clock (another replica
// takes it over) and then with its session; continued, it finds its leases
// lost and its late write is refused by the fence.
func TestZooKeeperPausedLockHolder(t *testing.T) {
	r := &result{Fault: "zk-pause-holder"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "zk"})
	load := c.startLoad(18*time.Second, loadVUs)
	load.waitTraffic(200)

	f := c.pauseHolder(nil, zkSession+time.Second)

	c.verify(r, load.wait())
	r.recovered(f.recovery)
	r.Detail = f.String()
	if f.grantsDuring == 0 {
		t.Errorf("no other replica was granted the lock while %s was stopped for %s", f.x, f.paused)
	}
	if !f.noticed {
		t.Errorf("%s counted no lost lease and no refused write after being stopped past its session", f.x)
	}
	if f.recovery > lease+recoverySlack {
		t.Errorf("the SKU was blocked %s by a holder stopped inside its write; the lease is %s (+%s)", f.recovery, lease, recoverySlack)
	}
}

//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// The lock services that run on a server of their own (etcd, ZooKeeper, an
// Azure blob lease on Azurite) under the same three faults: the server stopped
// past every lease and session, killed and restarted on its data, and a lock
// holder stopped past its lease. verify checks I1-I4 as for every fault: 0
// units oversold, 0 acknowledged orders lost.

// lockServer is a lock service in these tests, and how long its design lets a
// fault keep a SKU.
type lockServer struct {
	kind string // clusterOptions.lock, and the fault names' prefix
	name string // the server, in the details
	// leaseBound is the longest a lease can keep its SKU once its holder, or
	// the server, stopped renewing it: the lease and what the service adds.
	leaseBound time.Duration
	// reconnect is what a replica's client may take to be connected again once
	// the server answers.
	reconnect time.Duration
}

// pastLeases is how long a server or a holder is stopped: past every lease of
// every service (etcd's is the longest: twice it) and a second past
// ZooKeeper's sessions (zklock's default, which the private server grants). 5s.
const pastLeases = max(2*etcdLease, zklock.DefaultSessionTimeout+time.Second)

// etcdLease is how long an etcd lease of the replicas' lock lasts: the lock's
// TTL (lease, 1s) rounded up to etcd's minimum, 2s with the default election
// timeout, plus the lessor's expiry check (every 500ms). A dead holder blocks
// its SKU that long, not a lease.
const etcdLease = 2*time.Second + 500*time.Millisecond

// zkReconnect is what a replica's ZooKeeper client may take, once the server
// answers again, to be connected: it retries a failed server list after 1s.
const zkReconnect = 2 * time.Second

// azblobStaleSlack is what the backend may add to a lease before a waiter
// breaks it: a waiter that had not been watching the blob judges staleness by
// the Date and Last-Modified headers, whole seconds (see pkg/lock/azlease).
const azblobStaleSlack = time.Second

var (
	// etcd: a lease ends on the leader's clock, rounded up to etcd's minimum;
	// clients reconnect at most a second apart (etcdlock.ReconnectBackoffMax).
	etcdServer = lockServer{kind: "etcd", name: "etcd", leaseBound: etcdLease, reconnect: etcdlock.ReconnectBackoffMax + 200*time.Millisecond}
	// ZooKeeper: a lease ends on the leader's clock after its TTL, or with its
	// holder's session; clients reconnect after a second.
	zkServer = lockServer{kind: "zk", name: "ZooKeeper", leaseBound: lease, reconnect: zkReconnect}
	// Azure blob lease: waiters break a lease not renewed for its TTL.
	azblobServer = lockServer{kind: "azblob", name: "Azurite", leaseBound: lease + azblobStaleSlack}
)

// restartLoadCap bounds lockServerRestarted's load, which the test stops once
// it has what it waits for: the waits it may take (60s for the first 200
// decisions, a minute for the restart, 20s for the recovery, 60s for 200 more)
// are all bounded, so a load that reaches the cap means one of them failed.
const restartLoadCap = 4 * time.Minute

func TestEtcdLockServerPaused(t *testing.T)         { lockServerPaused(t, etcdServer) }
func TestEtcdLockServerRestarted(t *testing.T)      { lockServerRestarted(t, etcdServer) }
func TestEtcdPausedLockHolder(t *testing.T)         { lockHolderPaused(t, etcdServer) }
func TestZooKeeperLockServerPaused(t *testing.T)    { lockServerPaused(t, zkServer) }
func TestZooKeeperLockServerRestarted(t *testing.T) { lockServerRestarted(t, zkServer) }
func TestZooKeeperPausedLockHolder(t *testing.T)    { lockHolderPaused(t, zkServer) }
func TestAzblobLockServerPaused(t *testing.T)       { lockServerPaused(t, azblobServer) }
func TestAzblobLockServerRestarted(t *testing.T)    { lockServerRestarted(t, azblobServer) }
func TestAzblobPausedLockHolder(t *testing.T)       { lockHolderPaused(t, azblobServer) }

// lockServerPaused: the server stopped (SIGSTOP) under load past every lease
// and session, then continued. While it is stopped no lock can be obtained or
// renewed: once the leases held then have ended, no order is decided (a holder
// inside its work loses its lease). Continued, the service ends the leases
// whose time has passed, and orders are decided again within a lease.
func lockServerPaused(t *testing.T, s lockServer) {
	r := &result{Fault: s.kind + "-pause"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: s.kind})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	errsBefore, lostBefore := c.lb.errors5xx(anyReplica), c.total(mLeasesLost)
	stopped := time.Now()
	c.lockServer.Pause()
	hold(pastLeases) // the fault's length, watched by the load's own traffic
	// Writes already under a lock may finish within their lease; none after.
	settled := stopped.Add(lease + recoverySlack)
	at, decided := c.lb.firstDecision(settled, anyReplica)
	resumed := time.Now()
	c.lockServer.Resume()
	if decided && at.Before(resumed) {
		t.Errorf("an order was decided %s after %s was stopped (a lease ended by then): no lock service, no lock", at.Sub(stopped), s.name)
	}
	recovery := c.recoveredAfter(resumed, anyReplica)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.finish(afterFault))
	lost := c.total(mLeasesLost) - lostBefore
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("%s stopped (SIGSTOP) %dms: no decision from %s after the stop until it continued; %d 5xx answers, %g leases lost; first decision %dms after it continued",
		s.name, resumed.Sub(stopped).Milliseconds(), lease+recoverySlack, errs, lost, recovery.Milliseconds())
	if bound := s.reconnect + s.leaseBound + recoverySlack; recovery > bound {
		t.Errorf("orders were decided again only %s after %s continued (bound %s)", recovery, s.name, bound)
	}
}

// lockServerRestarted: the server killed (SIGKILL) under load and started
// again on its data directory after two leases. etcd and ZooKeeper keep what
// they acknowledged (fsynced): lock keys, leases and sessions, and what tokens
// are made of, which keep growing. Azurite saves every 5s: what it had not
// saved is lost, tokens included, so a token can repeat and the store's fence
// refuses it. Orders are decided again within a lease of its answering.
//
// The load runs until 200 orders have been decided after the recovery, then
// is stopped (restartLoadCap at most): its phases (200 decisions, the outage,
// a JVM's start, the recovery, 200 more) take as long as the machine makes
// them, and a load of a fixed length could end before the last of them.
func lockServerRestarted(t *testing.T, s lockServer) {
	r := &result{Fault: s.kind + "-restart"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: s.kind})
	load := c.startLoad(restartLoadCap, loadVUs)
	load.waitTraffic(200)

	errsBefore, fencedBefore := c.lb.errors5xx(anyReplica), c.total(mFenceRejections)
	killed := time.Now()
	c.lockServer.Kill()
	hold(2 * lease) // the outage, watched by the load's own traffic
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	restarted := time.Now()
	if err := c.lockServer.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	recovery := c.recoveredAfter(answered, anyReplica)
	load.waitTraffic(c.lb.decisionCount(anyReplica) + 200) // and orders go on
	load.stop()
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.wait())
	fenced := c.total(mFenceRejections) - fencedBefore
	r.recovered(answered.Sub(restarted) + recovery)
	r.Detail = fmt.Sprintf("%s killed (SIGKILL), restarted on its data %dms later, answering %dms after that; first decision %dms after it answered; %d 5xx answers, %g writes refused by the fence",
		s.name, restarted.Sub(killed).Milliseconds(), answered.Sub(restarted).Milliseconds(), recovery.Milliseconds(), errs, fenced)
	if bound := s.reconnect + s.leaseBound + recoverySlack; recovery > bound {
		t.Errorf("orders were decided again only %s after %s answered again (bound %s)", recovery, s.name, bound)
	}
}

// lockHolderPaused: a lock holder (a replica) stopped with SIGSTOP inside its
// write past its lease (and its ZooKeeper session): the service ends its lease,
// another replica takes the lock with a higher token, and the stopped one finds
// its lease lost, or its write refused by the fence, when it runs again.
func lockHolderPaused(t *testing.T, s lockServer) {
	r := &result{Fault: s.kind + "-pause-holder"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: s.kind})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	f := c.pauseHolder(nil, pastLeases)

	c.verify(r, load.finish(afterFault))
	r.recovered(f.recovery)
	r.Detail = f.String()
	if f.grantsDuring == 0 {
		t.Errorf("no other replica was granted the lock while %s was stopped for %s: its lease did not end", f.x, f.paused)
	}
	if !f.noticed {
		t.Errorf("%s counted no lost lease and no refused write after being stopped past its lease", f.x)
	}
	if bound := s.leaseBound + recoverySlack; f.recovery > bound {
		t.Errorf("the SKU was blocked %s by a holder stopped inside its write (bound %s)", f.recovery, bound)
	}
}

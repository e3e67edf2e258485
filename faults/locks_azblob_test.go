//go:build faults

package faults

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The Azure blob lease lock service (STOCKGUARD_LOCK_URL azblob://, on a
// private Azurite) under the faults its design answers to. verify checks I1-I4
// as for every fault: 0 units oversold, 0 acknowledged orders lost.

// azblobStaleSlack is what the backend may add to a lease before a waiter
// breaks it: a waiter that had not been watching the blob judges staleness by
// the Date and Last-Modified headers, whole seconds (see pkg/lock/azlease).
const azblobStaleSlack = time.Second

// Azurite stopped (SIGSTOP) for five leases under load: no lease can be
// renewed nor obtained, so no order is decided once the leases held then have
// ended (a holder inside its work then loses its lease, if one was); resumed,
// the stale leases are broken and orders go on.
func TestAzblobLockServerPaused(t *testing.T) {
	r := &result{Fault: "azblob-pause"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "azblob"})
	load := c.startLoad(16*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore, lostBefore := c.lb.errors5xx(anyReplica), c.total(mLeasesLost)
	paused := time.Now()
	c.azurite.Pause()
	// Writes already under a lock may finish within their lease; none after.
	settled := paused.Add(lease + recoverySlack)
	hold(5 * lease) // the window watched for decisions, of the load's own traffic
	decidedPaused, sawDecision := c.lb.firstDecision(settled, anyReplica)
	resumed := time.Now()
	c.azurite.Resume()
	recovery := c.recoveredAfter(resumed, anyReplica)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.wait())
	lost := c.total(mLeasesLost) - lostBefore
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("Azurite stopped %s (lease %s): %d 5xx answers, %g leases lost; resumed, first decision %dms after",
		resumed.Sub(paused).Round(time.Millisecond), lease, errs, lost, recovery.Milliseconds())
	if sawDecision && decidedPaused.Before(resumed) {
		t.Errorf("an order was decided %s after Azurite stopped (a lease ended by then): no lock service, no lock", decidedPaused.Sub(paused))
	}
	if recovery > lease+azblobStaleSlack+recoverySlack {
		t.Errorf("orders were decided again only %s after Azurite resumed", recovery)
	}
}

// Azurite killed (SIGKILL) under load and started again on its directory: the
// leases and tokens it had not yet saved (it saves every 5s) are lost, so a
// token can repeat; the store's fence refuses it and the holder advances.
// Orders go on once it answers.
func TestAzblobLockServerRestarted(t *testing.T) {
	r := &result{Fault: "azblob-restart"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "azblob"})
	load := c.startLoad(14*time.Second, loadVUs)
	load.waitTraffic(200)

	errsBefore, fencedBefore := c.lb.errors5xx(anyReplica), c.total(mFenceRejections)
	killed := time.Now()
	c.azurite.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.azurite.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	recovery := c.recoveredAfter(answered, anyReplica)
	load.waitTraffic(c.lb.decisionCount(anyReplica) + 200)
	errs := c.lb.errors5xx(anyReplica) - errsBefore

	c.verify(r, load.wait())
	fenced := c.total(mFenceRejections) - fencedBefore
	r.recovered(answered.Sub(killed) + recovery)
	r.Detail = fmt.Sprintf("Azurite killed and restarted on its directory (answered %dms after the kill); first decision %dms after it answered; %d 5xx answers, %g writes refused by the fence",
		answered.Sub(killed).Milliseconds(), recovery.Milliseconds(), errs, fenced)
	if recovery > lease+azblobStaleSlack+recoverySlack {
		t.Errorf("orders were decided again only %s after Azurite answered again", recovery)
	}
}

// A lock holder (a replica) stopped (SIGSTOP) inside its write for three
// leases: it renews nothing, so the others break its lease and go on; resumed,
// it finds its lease lost or its write refused by the fence.
func TestAzblobPausedLockHolder(t *testing.T) {
	r := &result{Fault: "azblob-pause-holder"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, lock: "azblob"})
	load := c.startLoad(15*time.Second, loadVUs)
	load.waitTraffic(200)

	f := c.pauseHolder(nil, 3*lease)

	c.verify(r, load.wait())
	r.recovered(f.recovery)
	r.Detail = f.String()
	if f.grantsDuring == 0 {
		t.Errorf("no other replica was granted the lock while %s was stopped for %s: its lease was not broken", f.x, f.paused)
	}
	if !f.noticed {
		t.Errorf("%s counted no lost lease and no refused write after being stopped past its lease", f.x)
	}
	if f.recovery > lease+azblobStaleSlack+recoverySlack {
		t.Errorf("the SKU was blocked %s by a holder stopped inside its write; the lease is %s (+%s)", f.recovery, lease, azblobStaleSlack+recoverySlack)
	}
}

//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// loadVUs drive the hot SKU: enough that some replica always holds its lock.
const loadVUs = 16

// afterFault is how many orders the load must see decided once a test's fault
// is over before it is stopped (loadRun.finish): the service deciding again
// on its every path, from every replica the balancer sends to.
const afterFault = 200

// faultLoadCap is the most the load of a test that finishes it runs: finish
// stops it afterFault decisions after the fault, so its length only bounds a
// test whose phases hang. A fixed length of 12 to 22 s ended, on a loaded
// machine, before the phases it was there for (TestRedisRestartedEmpty's second
// restart found no order being written).
const faultLoadCap = 2 * time.Minute

// recoveredAfter waits (at most 20s) for a decision after t0 by a replica
// accepted by keep, and returns how long after t0 it came.
func (c *cluster) recoveredAfter(t0 time.Time, keep func(int) bool) time.Duration {
	var first time.Time
	waitFor(c.t, 20*time.Second, "a decision after the fault", func() bool {
		var ok bool
		first, ok = c.lb.firstDecision(t0, keep)
		return ok
	})
	return first.Sub(t0)
}

func (c *cluster) othersThan(x *replica) []*replica {
	var out []*replica
	for _, r := range c.all() {
		if r.idx != x.idx {
			out = append(out, r)
		}
	}
	return out
}

// pauseFigures is what a pause did.
type pauseFigures struct {
	x            *replica
	caught       bool          // stopped inside its write
	paused       time.Duration // how long it was stopped
	grantsDuring float64       // grants to the other replicas meanwhile
	noticed      bool          // it counted a lost lease or a refused write after
	recovery     time.Duration // from the stop to the others' first decision
}

// pauseHolder stops a replica with SIGSTOP for d, then continues it. With x nil
// it stops the lock holder caught inside its write (catchWriter); else x,
// wherever it is.
func (c *cluster) pauseHolder(x *replica, d time.Duration) pauseFigures {
	f := pauseFigures{x: x}
	release := func() {}
	if x == nil {
		f.x, release = c.catchWriter(c.hot, anyReplica)
		f.caught = true
	}
	x = f.x
	others := c.othersThan(x)
	before, _ := c.scrape(x)
	grantsBefore := c.sumOf(others, mGrants)
	t0 := time.Now()
	c.pause(x)
	release() // its write goes on in the database; its process does not
	hold(d)
	f.grantsDuring = c.sumOf(others, mGrants) - grantsBefore
	c.resume(x)
	f.paused = time.Since(t0)
	// Stopped past its lease, it finds its lease lost (or its write refused) once
	// it runs again, if it held one: surely when caught inside its write.
	wait := lease / 2
	if f.caught {
		wait = 5 * time.Second
	}
	deadline := time.Now().Add(wait)
	for !f.noticed && time.Now().Before(deadline) {
		m, err := c.scrape(x)
		f.noticed = err == nil && (m.sum(mLeasesLost) > before.sum(mLeasesLost) || m.sum(mFenceRejections) > before.sum(mFenceRejections))
		if !f.noticed {
			hold(20 * time.Millisecond) // polling its metrics, with a deadline
		}
	}
	f.recovery = c.recoveredAfter(t0, except(x.idx))
	return f
}

func (f pauseFigures) String() string {
	where := "wherever it was"
	if f.caught {
		where = "inside its write"
	}
	return fmt.Sprintf("%s stopped %dms %s; %g grants to the others meanwhile; lease loss noticed: %v; the others' first decision %dms after the stop",
		f.x.name, f.paused.Milliseconds(), where, f.grantsDuring, f.noticed, f.recovery.Milliseconds())
}

// killHolder kills a replica with SIGKILL (with x nil, the lock holder caught
// inside its write), measures how long the others take to decide again, and
// starts a new instance of it.
func (c *cluster) killHolder(x *replica) (time.Duration, string) {
	release, where := func() {}, "wherever it was"
	if x == nil {
		x, release = c.catchWriter(c.hot, anyReplica)
		where = "inside its write"
	}
	t0 := time.Now()
	c.kill(x)
	release()
	recovery := c.recoveredAfter(t0, except(x.idx))
	c.restart(x)
	return recovery, fmt.Sprintf("%s killed %s; the others' first decision %dms later; restarted", x.name, where, recovery.Milliseconds())
}

// restartFigures is what a restart of Redis did.
type restartFigures struct {
	x               *replica      // the holder caught inside its write
	noticed         bool          // a lost lease or a refused write counted, on any replica
	grantsWhileHeld float64       // grants to the others seen while x had not yet counted its loss
	dbOverlaps      int           // database samples of one replica's write waiting on another's
	recovery        time.Duration // from the restart to the first decision
}

// overlapped reports whether two holds were seen at once.
func (f restartFigures) overlapped() bool { return f.grantsWhileHeld > 0 || f.dbOverlaps > 0 }

func (f restartFigures) String() string {
	return fmt.Sprintf("redis-server restarted empty while %s was inside its write; %g grants to the others before it noticed; %d DB samples of overlapping writes; loss noticed: %v; first decision %dms after",
		f.x.name, f.grantsWhileHeld, f.dbOverlaps, f.noticed, f.recovery.Milliseconds())
}

// restartRedis kills the private redis-server and starts it empty on the same
// port while the lock holder x is caught inside its write. The lock goes with
// the server, so the others may obtain it from the empty server while x, alive
// and inside its write, still holds its grant, until its watchdog's next
// renewal finds the lock gone. Two holds overlap then, seen two ways: grants to
// the others scraped before x counted its loss (the others are scraped first,
// so each grant counted came before), and in the database, the others' write
// of the row waiting on x's. x's write is kept waiting until x noticed, or two
// leases passed, as a write slower than the renewal interval would be.
func (c *cluster) restartRedis() restartFigures {
	lostBefore, fencedBefore := c.total(mLeasesLost), c.total(mFenceRejections)
	x, release := c.catchWriter(c.hot, anyReplica)
	f := restartFigures{x: x}
	others := c.othersThan(x)
	xBefore, _ := c.scrape(x)
	grantsBefore := c.sumOf(others, mGrants)
	dbBefore, _ := c.overlap.seen()
	t0 := time.Now()
	c.redis.Restart(c.t)
	for deadline := time.Now().Add(2 * lease); time.Now().Before(deadline); {
		g := c.sumOf(others, mGrants)
		m, err := c.scrape(x)
		if err == nil && (m.sum(mLeasesLost) > xBefore.sum(mLeasesLost) || m.sum(mFenceRejections) > xBefore.sum(mFenceRejections)) {
			break
		}
		f.grantsWhileHeld = g - grantsBefore
		hold(20 * time.Millisecond) // polling the metrics, with a deadline
	}
	release()
	f.recovery = c.recoveredAfter(t0, anyReplica)
	f.noticed = c.total(mLeasesLost) > lostBefore || c.total(mFenceRejections) > fencedBefore
	dbAfter, _ := c.overlap.seen()
	f.dbOverlaps = dbAfter - dbBefore
	return f
}

// stallRedis runs DEBUG SLEEP on the private redis-server for d and returns
// the time from the end of the stall to the first decision.
func (c *cluster) stallRedis(d time.Duration) (time.Duration, string) {
	rdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr, ReadTimeout: d + 10*time.Second, MaxRetries: -1})
	defer func() { _ = rdb.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
	defer cancel()
	t0 := time.Now()
	if err := rdb.Do(ctx, "DEBUG", "SLEEP", fmt.Sprintf("%.3f", d.Seconds())).Err(); err != nil {
		c.t.Fatalf("DEBUG SLEEP: %v", err)
	}
	t1 := time.Now()
	recovery := c.recoveredAfter(t1, anyReplica)
	return recovery, fmt.Sprintf("Redis stalled %dms; first decision %dms after it answered again", t1.Sub(t0).Milliseconds(), recovery.Milliseconds())
}

// linkFaults are the toxics of one replica's Redis link, by name: "slow" delays
// each way by 400ms (a round trip of 800ms, past the renewal interval, TTL/3, and
// past what is left of a lease at a renewal), "cut" drops every byte and keeps
// the connections open (a partition), "reset" resets every connection as soon as
// it carries data.
var linkFaults = map[string][]string{
	"slow": {`{"name":"slow-up","type":"latency","stream":"upstream","attributes":{"latency":400}}`,
		`{"name":"slow-down","type":"latency","stream":"downstream","attributes":{"latency":400}}`},
	"cut": {`{"name":"cut-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`,
		`{"name":"cut-down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`},
	"reset": {`{"name":"reset-up","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`},
}

// linkFigures is what one fault of one replica's Redis link did.
type linkFigures struct {
	kind       string
	x          *replica
	inWrite    bool          // the fault began while it was inside its write
	errors     int           // its 5xx answers to orders during the fault and until it recovered
	leasesLost float64       // its lost leases
	recovery   time.Duration // from the toxics' removal to its first decision
	othersGap  time.Duration // the longest time without a decision by the others, during the fault
}

// faultLink applies a link fault to replica idx's Redis connections for d, then
// removes it. With inWrite, the fault starts while the replica is caught inside
// its write, holding the SKU's lock, and the write is kept waiting until the
// replica counts its lease lost (or d ends), as a write slower than a renewal
// would be: its watchdog, not luck, must stop it.
func (c *cluster) faultLink(kind string, idx int, d time.Duration, inWrite bool) linkFigures {
	t := c.t
	f := linkFigures{kind: kind, x: c.all()[idx], inWrite: inWrite}
	link := c.links[idx]
	before, _ := c.scrape(f.x)
	errsBefore := c.lb.errors5xx(only(idx))
	release := func() {}
	if inWrite {
		_, release = c.catchWriter(c.hot, only(idx))
	}
	t0 := time.Now()
	var names []string
	for _, js := range linkFaults[kind] {
		w, err := link.Toxics.AddToxicJson(strings.NewReader(js))
		if err != nil {
			release()
			t.Fatalf("toxic %s: %v", js, err)
		}
		names = append(names, w.Name)
	}
	for inWrite && time.Since(t0) < d {
		if m, err := c.scrape(f.x); err == nil && m.sum(mLeasesLost) > before.sum(mLeasesLost) {
			break
		}
		hold(20 * time.Millisecond) // polling its metrics, within the fault's length
	}
	release()
	hold(d - time.Since(t0))
	for _, n := range names {
		if err := link.Toxics.RemoveToxic(context.Background(), n); err != nil {
			t.Fatalf("remove toxic %s: %v", n, err)
		}
	}
	t1 := time.Now()
	f.recovery = c.recoveredAfter(t1, only(idx))
	f.othersGap = c.lb.longestGap(t0, t1, except(idx))
	after, _ := c.scrape(f.x)
	f.leasesLost = after.sum(mLeasesLost) - before.sum(mLeasesLost)
	f.errors = c.lb.errors5xx(only(idx)) - errsBefore
	return f
}

func (f linkFigures) String() string {
	where := ""
	if f.inWrite {
		where = " (from inside its write)"
	}
	return fmt.Sprintf("%s%s: %s lost %g leases and answered %d 5xx, decided again %dms after the link was repaired; the others' longest pause %dms",
		f.kind, where, f.x.name, f.leasesLost, f.errors, f.recovery.Milliseconds(), f.othersGap.Milliseconds())
}

// terminateMidWrite catches replica idx inside its write of the SKU and ends
// every PostgreSQL session it has, then returns how many it ended and how long
// until it decided again.
func (c *cluster) terminateMidWrite(idx int) (int, time.Duration) {
	x, release := c.catchWriter(c.hot, only(idx))
	n := c.terminateSessions(x)
	t0 := time.Now()
	release()
	return n, c.recoveredAfter(t0, only(idx))
}

// A lock holder stopped (SIGSTOP) inside its critical section for three leases,
// then continued (SIGCONT). Other replicas must take the SKU over once its
// lease ends (PostgreSQL ends its session idle in its transaction, which holds
// the SKU's row, after a lease), and its stale write must not undo theirs.
func TestPausedLockHolder(t *testing.T) {
	r := &result{Fault: "pause"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	f := c.pauseHolder(nil, 3*lease)

	c.verify(r, load.finish(afterFault))
	samples, pairs := c.overlap.seen()
	r.recovered(f.recovery)
	r.Overlap = fmt.Sprintf("%g grants to others while the stopped holder held its grant; %d DB samples of a write waiting on another replica's (%s)",
		f.grantsDuring, samples, pairs)
	r.Detail = f.String()
	if f.grantsDuring == 0 {
		t.Errorf("no other replica was granted the lock while %s was stopped for %s: the pause did not break the lock", f.x, f.paused)
	}
	if !f.noticed {
		t.Errorf("%s counted no lost lease and no refused write after being stopped past its lease", f.x)
	}
	if f.recovery > lease+recoverySlack {
		t.Errorf("the SKU was blocked %s by a holder stopped inside its write; the lease is %s (+%s)", f.recovery, lease, recoverySlack)
	}
}

// A lock holder killed (SIGKILL) inside its critical section. The SKU must be
// free again within one lease (I5), plus the waiters' poll.
func TestKilledLockHolder(t *testing.T) {
	r := &result{Fault: "kill"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	recovery, detail := c.killHolder(nil)

	c.verify(r, load.finish(afterFault))
	r.recovered(recovery)
	r.Detail = detail
	if recovery > lease+recoverySlack {
		t.Errorf("I5: the SKU was blocked %s after its holder died; the lease is %s (+%s for the waiters' poll)", recovery, lease, recoverySlack)
	}
}

// The private redis-server killed and started again empty, without
// persistence: every lock and fencing counter is gone while a holder is inside
// its write. The fence must keep the writes in order (I3), and the holders of
// the lost locks must notice.
func TestRedisRestartedEmpty(t *testing.T) {
	r := &result{Fault: "redis-restart"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	// The holder may notice before anyone else was granted the lock (its
	// renewal came right after the restart): then no overlap is there to see,
	// and the restart is tried again, three times at most.
	var f restartFigures
	for try := 0; try < 3 && !f.overlapped(); try++ {
		f = c.restartRedis()
		if !f.noticed {
			t.Errorf("no lost lease and no refused write counted after Redis lost every lock (%s)", f)
		}
	}

	c.verify(r, load.finish(afterFault))
	_, pairs := c.overlap.seen()
	r.recovered(f.recovery)
	r.Detail = f.String()
	r.Overlap = fmt.Sprintf("%g grants to others before the holder noticed its lock gone; %d DB samples of a write waiting on another replica's (%s)",
		f.grantsWhileHeld, f.dbOverlaps, pairs)
	if !f.overlapped() {
		t.Errorf("in three restarts of Redis, no other replica was granted the lock while the holder still held its grant")
	}
}

// Redis stalled with DEBUG SLEEP for three leases: every lease runs out
// unrenewed. Holders must be cancelled (their leases counted lost), orders must
// fail fast (503), and the SKU must be sold again once Redis answers.
func TestRedisStalled(t *testing.T) {
	r := &result{Fault: "redis-stall"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	lostBefore, errsBefore := c.total(mLeasesLost), c.lb.errors5xx(anyReplica)
	recovery, detail := c.stallRedis(3 * lease)
	lost, errs := c.total(mLeasesLost)-lostBefore, c.lb.errors5xx(anyReplica)-errsBefore

	c.verify(r, load.finish(afterFault))
	r.recovered(recovery)
	r.Detail = fmt.Sprintf("%s; %g leases lost and %d 5xx answers during the stall", detail, lost, errs)
	if lost == 0 && errs == 0 {
		t.Errorf("the stall had no visible effect: no lease lost, no 5xx answer")
	}
	if recovery > lease+recoverySlack {
		t.Errorf("orders were decided again only %s after Redis answered", recovery)
	}
}

// One replica's link to Redis, through toxiproxy (in-process), slowed past the
// renewal interval, then cut, then reset, each for two leases. That replica
// must lose its leases and answer 503 rather than hang, recover when its link
// does, and never block the SKU for the others longer than two leases (its last
// lease, then locks its late obtains set).
func TestRedisLinkSlowCutReset(t *testing.T) {
	r := &result{Fault: "redis-link"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3, links: true})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	var figs []linkFigures
	for _, kind := range []string{"slow", "cut", "reset"} {
		figs = append(figs, c.faultLink(kind, 0, 2*lease, true))
	}

	c.verify(r, load.finish(afterFault))
	var notes []string
	for _, f := range figs {
		notes = append(notes, f.String())
		r.recovered(f.recovery)
		if f.leasesLost == 0 {
			t.Errorf("link %s: %s, holding the lock when its link failed, counted no lost lease", f.kind, f.x)
		}
		// The others may wait out the faulty replica's last lease, then its obtains
		// that reached Redis but were answered too late for it (over a slow link
		// each holds the lock until its undo arrives): two leases and the poll.
		if f.othersGap > 2*lease+recoverySlack {
			t.Errorf("link %s: the other replicas decided nothing for %s while %s's link was faulty", f.kind, f.othersGap, f.x)
		}
	}
	r.Detail = strings.Join(notes, "; ")
}

// One replica's PostgreSQL sessions terminated (pg_terminate_backend, by its
// application_name) while it is inside its write, three times. Its write must
// fail cleanly (no acknowledged order lost, no unit lost), and it must recover.
func TestDatabaseSessionsTerminated(t *testing.T) {
	r := &result{Fault: "db-terminate"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(200)

	errsBefore := c.lb.errors5xx(only(0))
	ended := 0
	for range 3 {
		n, recovery := c.terminateMidWrite(0)
		ended += n
		r.recovered(recovery)
	}
	errs := c.lb.errors5xx(only(0)) - errsBefore

	c.verify(r, load.finish(afterFault))
	r.Detail = fmt.Sprintf("3 times inside its write, %d sessions of %s ended; it answered %d 5xx; decided again at most %.0fms after",
		ended, c.all()[0].name, errs, *r.RecoveryMS)
	if ended < 3 || errs == 0 {
		t.Errorf("the terminations had no visible effect: %d sessions ended, %d 5xx answers", ended, errs)
	}
}

//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/etcdlock"
	"github.com/stockguard/stockguard/pkg/lock/lockserver"
	"github.com/stockguard/stockguard/pkg/lock/lockserver/lockservertest"
	"github.com/stockguard/stockguard/pkg/lock/zklock"
)

// The etcd and ZooKeeper lock backends on three-member ensembles
// (lockserver.StartEtcdCluster, StartZooKeeperEnsemble), the Backend's URL
// listing every member. No replicas and no load generator: lock.Clients in the
// test (each on a Backend of its own, as a process would be) take two keys
// over and over, and every grant is checked as it is entered:
//
//   - a holder keeps its lock or learns it lost it (its work's context
//     cancelled) before another holder of the key is granted;
//   - tokens strictly increase per key, across the fault: the first token
//     after it is above every token before.
//
// Faults: the leader killed (SIGKILL) and later restarted; one member stopped
// (SIGSTOP) and continued; two of three killed (no quorum), where obtaining
// must fail with lock.ErrUnavailable, never grant, within a bound, and then
// the two restarted.

// ensembleKind is a lock backend on an ensemble.
type ensembleKind struct {
	name  string // the fault names' prefix
	start func(testing.TB) *lockserver.Ensemble
	// open opens a Backend on the ensemble, under space, as a new process would.
	open func(t *testing.T, e *lockserver.Ensemble, space string) lock.Backend
}

var (
	etcdEnsemble = ensembleKind{name: "etcd-ensemble", start: lockservertest.EtcdCluster, open: func(t *testing.T, e *lockserver.Ensemble, space string) lock.Backend {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, closeFn, err := etcdlock.Open(ctx, "etcd://"+e.HostList()+"/"+space, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeFn)
		return b
	}}
	zkEnsemble = ensembleKind{name: "zk-ensemble", start: lockservertest.ZooKeeperEnsemble, open: func(t *testing.T, e *lockserver.Ensemble, space string) lock.Backend {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := zklock.Open(ctx, "zk://"+e.HostList(), &zklock.Options{Root: "/" + space})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}}
)

func TestEtcdEnsembleLeaderKilled(t *testing.T)  { ensembleLeaderKilled(t, etcdEnsemble) }
func TestEtcdEnsembleMemberStopped(t *testing.T) { ensembleMemberStopped(t, etcdEnsemble) }
func TestEtcdEnsembleQuorumLost(t *testing.T)    { ensembleQuorumLost(t, etcdEnsemble) }

func TestZooKeeperEnsembleLeaderKilled(t *testing.T)  { ensembleLeaderKilled(t, zkEnsemble) }
func TestZooKeeperEnsembleMemberStopped(t *testing.T) { ensembleMemberStopped(t, zkEnsemble) }
func TestZooKeeperEnsembleQuorumLost(t *testing.T)    { ensembleQuorumLost(t, zkEnsemble) }

// The lockers' settings: a short lease so that the faults bite within
// seconds, and the wait of a Do.
const (
	ensembleTTL  = time.Second
	ensembleWait = 3 * time.Second
)

var ensembleKeys = []string{"a", "b"}

// lockers are lock.Clients taking the keys in turn, and what they were granted.
type lockers struct {
	t    *testing.T
	kind ensembleKind
	e    *lockserver.Ensemble

	mu      sync.Mutex
	holders map[string]*holder // the key's holder inside its work
	last    map[string]int64   // the key's last token
	grants  []grantSeen
	bad     []string // violations

	leasesLost, unavailable, notObtained atomic.Int64

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type holder struct {
	ctx    context.Context
	worker int
	token  int64
}

type grantSeen struct {
	at    time.Time
	key   string
	token int64
}

// startLockers runs procs processes of two workers each, on one space of e.
func startLockers(t *testing.T, kind ensembleKind, e *lockserver.Ensemble, procs int) *lockers {
	t.Helper()
	l := &lockers{t: t, kind: kind, e: e, holders: map[string]*holder{}, last: map[string]int64{}}
	space := "faults-" + strings.ReplaceAll(t.Name(), "/", "-")
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for p := range procs {
		c, err := lock.NewClient(kind.open(t, e, space), &lock.Options{TTL: ensembleTTL, Wait: ensembleWait})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		for w := range 2 {
			id := 2*p + w
			l.wg.Go(func() { l.work(ctx, c, id) })
		}
	}
	t.Cleanup(l.halt)
	return l
}

// halt stops the workers and waits for them (bounded by their Do's wait).
func (l *lockers) halt() {
	l.stop()
	l.wg.Wait()
}

// work takes a key (in turn), holds it 10-50ms, and again, until ctx ends.
func (l *lockers) work(ctx context.Context, c *lock.Client, id int) {
	for i := 0; ctx.Err() == nil; i++ {
		key := ensembleKeys[(id+i)%len(ensembleKeys)]
		err := c.Do(ctx, []string{key}, func(wctx context.Context, g *lock.Grant) error {
			leave := l.enter(wctx, key, g.Token(key), id)
			defer leave()
			select {
			case <-wctx.Done():
				return context.Cause(wctx)
			case <-time.After(time.Duration(10+rand.IntN(40)) * time.Millisecond): // the work
				return nil
			}
		})
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, lock.ErrLeaseLost):
			l.leasesLost.Add(1)
		case errors.Is(err, lock.ErrUnavailable):
			l.unavailable.Add(1)
			pause(ctx, 50*time.Millisecond) // pacing: the backend answers errors at once
		default:
			l.notObtained.Add(1)
			pause(ctx, 50*time.Millisecond)
		}
	}
}

// pause waits d or until ctx ends: the workers' pace while the backend fails.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// enter checks a grant as its work begins: the key's previous holder, if still
// inside its work, must have learnt that it lost the lease; the token must be
// above the key's last. A worker whose lease was lost before its work began
// (a late process) does not count as a holder.
func (l *lockers) enter(ctx context.Context, key string, token int64, worker int) (leave func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil {
		return func() {}
	}
	if p := l.holders[key]; p != nil && context.Cause(p.ctx) == nil {
		l.bad = append(l.bad, fmt.Sprintf("key %s granted to worker %d (token %d) while worker %d (token %d) still held it, unaware", key, worker, token, p.worker, p.token))
	}
	if token <= l.last[key] {
		l.bad = append(l.bad, fmt.Sprintf("key %s: token %d after %d", key, token, l.last[key]))
	}
	h := &holder{ctx: ctx, worker: worker, token: token}
	l.holders[key], l.last[key] = h, token
	l.grants = append(l.grants, grantSeen{at: time.Now(), key: key, token: token})
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.holders[key] == h {
			delete(l.holders, key)
		}
	}
}

// count is how many grants were entered.
func (l *lockers) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.grants)
}

// waitGrants waits (within d) until n grants have been entered.
func (l *lockers) waitGrants(n int, d time.Duration, what string) {
	l.t.Helper()
	waitFor(l.t, d, what, func() bool { return l.count() >= n })
}

// tokens returns, per key, the highest token granted before t0 and the lowest
// granted after, and the first grant after t0.
func (l *lockers) tokens(t0 time.Time) (maxBefore, minAfter map[string]int64, first time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	maxBefore, minAfter = map[string]int64{}, map[string]int64{}
	for _, g := range l.grants {
		if g.at.Before(t0) {
			maxBefore[g.key] = max(maxBefore[g.key], g.token)
			continue
		}
		if first.IsZero() {
			first = g.at
		}
		if m, ok := minAfter[g.key]; !ok || g.token < m {
			minAfter[g.key] = g.token
		}
	}
	return maxBefore, minAfter, first
}

// check stops the workers and fails the test on any violation, and when a
// key's first token after t0 is not above its every token before: across a
// leader change, tokens are the cluster's (etcd's revision, ZooKeeper's zxid).
func (l *lockers) check(t0 time.Time) string {
	l.t.Helper()
	l.halt()
	l.mu.Lock()
	for _, v := range l.bad {
		l.t.Error(v)
	}
	l.mu.Unlock()
	before, after, _ := l.tokens(t0)
	var b strings.Builder
	for _, k := range ensembleKeys {
		if after[k] <= before[k] {
			l.t.Errorf("key %s: token %d after the fault, not above %d before it", k, after[k], before[k])
		}
		fmt.Fprintf(&b, "%s: %d before, %d after; ", k, before[k], after[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// ensembleLeaderKilled: the leader killed (SIGKILL) while locks are held and
// being taken; the others elect a new one and grants go on, every holder
// keeping its lock or learning it lost it before another is granted, tokens
// above the old leader's; the old leader restarted rejoins.
func ensembleLeaderKilled(t *testing.T, kind ensembleKind) {
	r := &result{Fault: kind.name + "-leader-kill"}
	record(t, r)
	e := kind.start(t)
	l := startLockers(t, kind, e, 3)
	l.waitGrants(50, 30*time.Second, "grants before the fault")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	old, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := l.count()
	killed := time.Now()
	e.Kill(old)
	l.waitGrants(n+50, 30*time.Second, "grants after the leader was killed")
	_, _, first := l.tokens(killed)
	elected, err := e.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if elected == old {
		t.Fatalf("member %d, killed, leads", old)
	}
	if err := e.Restart(ctx, old); err != nil {
		t.Fatal(err)
	}
	l.waitGrants(l.count()+50, 30*time.Second, "grants after the old leader rejoined")
	toks := l.check(killed)
	r.FencesMonotonic = !t.Failed()
	r.LeasesLost = float64(l.leasesLost.Load())
	r.recovered(first.Sub(killed))
	r.Detail = fmt.Sprintf("leader %d killed, %d elected; first grant %dms after the kill; %d grants, %d leases lost, %d unavailable, %d not obtained; tokens %s",
		old, elected, first.Sub(killed).Milliseconds(), l.count(), l.leasesLost.Load(), l.unavailable.Load(), l.notObtained.Load(), toks)
}

// ensembleMemberStopped: one member, a follower, stopped (SIGSTOP) for 5s and
// continued: the two others keep a quorum, and grants go on while it is
// stopped and after. Not at the full rate with etcd: its client spreads calls
// over every member and keeps the stopped one's connection until a keep-alive
// probe fails (etcdlock.KeepAliveTime, gRPC's minimum of 10s, plus
// KeepAliveTimeout), so a call sent there waits for the Client's OpTimeout.
func ensembleMemberStopped(t *testing.T, kind ensembleKind) {
	r := &result{Fault: kind.name + "-member-stop"}
	record(t, r)
	e := kind.start(t)
	l := startLockers(t, kind, e, 3)
	l.waitGrants(50, 30*time.Second, "grants before the fault")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stopped := (leader + 1) % len(e.Members)
	n := l.count()
	t0 := time.Now()
	e.Stop(stopped)
	hold(5 * time.Second) // the fault's length
	during := l.count() - n
	e.Cont(stopped)
	resumed := time.Now()
	l.waitGrants(l.count()+50, 30*time.Second, "grants after the member continued")
	if _, err := e.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, first := l.tokens(t0)
	toks := l.check(t0)
	if during == 0 {
		t.Errorf("%d grants in the 5s member %d was stopped: the service did not go on", during, stopped)
	}
	r.FencesMonotonic = !t.Failed()
	r.LeasesLost = float64(l.leasesLost.Load())
	r.recovered(first.Sub(t0))
	r.Detail = fmt.Sprintf("follower %d stopped %dms: %d grants meanwhile, the first %dms after the stop; %d grants, %d leases lost, %d unavailable, %d not obtained; tokens %s",
		stopped, resumed.Sub(t0).Milliseconds(), during, first.Sub(t0).Milliseconds(), l.count(), l.leasesLost.Load(), l.unavailable.Load(), l.notObtained.Load(), toks)
}

// quorumBound is how long an obtain may take to fail once the quorum is lost:
// the Do's wait, and a second of scheduling on a loaded machine.
const quorumBound = ensembleWait + time.Second

// ensembleQuorumLost: two members of three killed. No grant is entered later
// than a lease after the kill (a grant needs a quorum's write); the holders
// then lose their leases; a new obtain fails with lock.ErrUnavailable within
// quorumBound. The two restarted, grants go on with tokens above all before.
func ensembleQuorumLost(t *testing.T, kind ensembleKind) {
	r := &result{Fault: kind.name + "-quorum-loss"}
	record(t, r)
	e := kind.start(t)
	l := startLockers(t, kind, e, 3)
	probe, err := lock.NewClient(kind.open(t, e, "faults-probe-"+kind.name), &lock.Options{TTL: ensembleTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = probe.Close() })
	l.waitGrants(50, 30*time.Second, "grants before the fault")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	down := []int{leader, (leader + 1) % len(e.Members)}
	killed := time.Now()
	for _, i := range down {
		e.Kill(i)
	}
	// A Do's wait from now on, no grant: calls in flight at the kill ended by
	// then (each is bounded by the Client's OpTimeout, TTL/3).
	settled := killed.Add(ensembleTTL + time.Second)
	pctx, pcancel := context.WithTimeout(ctx, ensembleWait)
	t0 := time.Now()
	probeErr := probe.Do(pctx, []string{"q"}, func(context.Context, *lock.Grant) error { return nil })
	took := time.Since(t0)
	pcancel()
	if !errors.Is(probeErr, lock.ErrUnavailable) {
		t.Errorf("obtain without a quorum: %v, want lock.ErrUnavailable", probeErr)
	}
	if took > quorumBound {
		t.Errorf("obtain without a quorum took %s to fail (bound %s)", took, quorumBound)
	}
	if d := time.Until(settled.Add(2 * time.Second)); d > 0 {
		hold(d) // the outage goes on: the workers keep trying
	}
	// Every holder has learnt it lost its lease by now.
	l.mu.Lock()
	for k, h := range l.holders {
		if context.Cause(h.ctx) == nil {
			t.Errorf("worker %d still holds key %s unaware, %s after the quorum was lost", h.worker, k, time.Since(killed))
		}
	}
	l.mu.Unlock()
	restarted := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(down))
	for k, i := range down {
		wg.Go(func() { errs[k] = e.Restart(ctx, i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	answered := time.Now()
	l.waitGrants(l.count()+50, 60*time.Second, "grants after the quorum was back")
	_, _, firstBack := l.tokens(answered)
	wrong := 0
	l.mu.Lock()
	for _, g := range l.grants {
		if g.at.After(settled) && g.at.Before(restarted) {
			wrong++
			t.Errorf("key %s granted (token %d) %s after the quorum was lost", g.key, g.token, g.at.Sub(killed))
		}
	}
	l.mu.Unlock()
	// The probe obtains again, a token above every one before.
	pctx, pcancel = context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := probe.Do(pctx, []string{"q"}, func(context.Context, *lock.Grant) error { return nil }); err != nil {
		t.Errorf("obtain with the quorum back: %v", err)
	}
	toks := l.check(killed)
	r.FencesMonotonic = !t.Failed()
	r.LeasesLost = float64(l.leasesLost.Load())
	r.recovered(firstBack.Sub(answered))
	r.Detail = fmt.Sprintf("members %v killed: a new obtain failed with %v after %dms; %d grants from %s after the kill until the restart; restarted, answering %dms later, the first grant %dms after that; %d leases lost, %d unavailable; tokens %s",
		down, errorName(probeErr), took.Milliseconds(), wrong, settled.Sub(killed), answered.Sub(restarted).Milliseconds(), firstBack.Sub(answered).Milliseconds(), l.leasesLost.Load(), l.unavailable.Load(), toks)
}

// errorName is the lock error err is.
func errorName(err error) string {
	for _, e := range []error{lock.ErrUnavailable, lock.ErrNotObtained, lock.ErrLeaseLost} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err == nil {
		return "no error (granted)"
	}
	return err.Error()
}

//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The holds tests: the sweeper's leader stopped past its lease and killed,
// Redis lost while holds fall due, and confirms racing expiry. Each runs three
// replicas with a sweep every sweepInterval and the lease of the other tests
// (which is also the sweeper's leader lease), and checks after it what
// checkHolds says.

// streamFor is how long the hold stream runs in the tests that use it.
const streamFor = 12 * time.Second

// waitSweeping waits until the sweeper has expired a few holds, and returns its
// leader.
func (c *cluster) waitSweeping() *replica {
	waitFor(c.t, 30*time.Second, "the sweeper expiring holds", func() bool { return c.total(mHolds, expiredEvent) >= 5 })
	return c.waitLeader(c.all(), 10*time.Second)
}

// takeover is how another replica took the sweeper over, from the fault: it
// led, and first expired holds, after the last poll that did not see it (sent
// then) and by the first that did (answered then). On a loaded machine a
// scrape can take most of a second, so both ends are kept.
type takeover struct {
	by                  *replica
	leadAfter, leadBy   time.Duration
	sweptAfter, sweptBy time.Duration
}

func (k takeover) String() string {
	if k.by == nil {
		return "no other replica took the sweeper over"
	}
	return fmt.Sprintf("%s led %d-%dms after, and expired holds %d-%dms after", k.by,
		k.leadAfter.Milliseconds(), k.leadBy.Milliseconds(), k.sweptAfter.Milliseconds(), k.sweptBy.Milliseconds())
}

// watchTakeover polls the replicas other than x (every 20ms) for one of them
// leading and expiring holds, for at least minimum and at most within from t0.
func (c *cluster) watchTakeover(x *replica, t0 time.Time, minimum, within time.Duration) takeover {
	others := c.othersThan(x)
	before := c.sumOf(others, mHolds, expiredEvent)
	var k takeover
	for {
		sent := time.Since(t0)
		if k.leadBy == 0 {
			if l := c.leaders(others); len(l) == 1 {
				k.by, k.leadBy = l[0], time.Since(t0)
			} else {
				k.leadAfter = sent
			}
		}
		sent = time.Since(t0)
		if k.sweptBy == 0 {
			if c.sumOf(others, mHolds, expiredEvent) > before {
				k.sweptBy = time.Since(t0)
			} else {
				k.sweptAfter = sent
			}
		}
		since := time.Since(t0)
		if (since >= minimum && k.leadBy > 0 && k.sweptBy > 0) || since >= within {
			return k
		}
		hold(20 * time.Millisecond) // polling the replicas' metrics, with a deadline
	}
}

// checkTakeover fails the test when the sweeper was surely not taken over
// within one lease of the fault, plus a sweep interval and recoverySlack: when
// a poll sent past that bound still saw no other replica leading, or sweeping.
func checkTakeover(t *testing.T, k takeover, what string) {
	t.Helper()
	bound := lease + sweepInterval + recoverySlack
	switch {
	case k.by == nil:
		t.Errorf("%s: no other replica led the sweeper", what)
	case k.leadAfter > bound:
		t.Errorf("%s: no other replica led the sweeper %s after; the lease is %s (+%s +%s)", what, k.leadAfter, lease, sweepInterval, recoverySlack)
	case k.sweptBy == 0 || k.sweptAfter > bound:
		t.Errorf("%s: the new leader expired no hold within %s (%s)", what, bound, k)
	}
}

// The sweeper's leader stopped (SIGSTOP) for three leases while holds fall
// due, then continued (SIGCONT). Another replica must lead and sweep within a
// lease; the former leader, continued, must stop leading, and any late write
// of its sweep is refused by the leader fence (stockguard_sweeper_refusals_total)
// or the SKUs' fences: no unit is returned twice.
func TestSweeperLeaderPaused(t *testing.T) {
	r := &result{Fault: "sweeper-pause"}
	record(t, r)
	c := newHoldsCluster(t)
	skus := c.stockSKUs("sp", 4, 150)
	s := c.startHoldStream(skus, streamFor, 6)
	x := c.waitSweeping()

	before, _ := c.scrape(x)
	t0 := time.Now()
	c.pause(x)
	k := c.watchTakeover(x, t0, 3*lease, 3*lease+10*time.Second)
	c.resume(x)
	paused := time.Since(t0)
	waitFor(t, 10*time.Second, "the continued former leader no longer leading", func() bool {
		m, err := c.scrape(x)
		return err == nil && m.sum(mLeader) == 0
	})
	after, _ := c.scrape(x)
	refused := after.sum(mSweepRefusals) - before.sum(mSweepRefusals)
	fenced := after.sum(mFenceRejections) - before.sum(mFenceRejections)
	// Its SKU locks' leases, if it was sweeping when stopped, and its leader lease.
	lost := after.sum(mLeasesLost) - before.sum(mLeasesLost) + after.sum(mLeaderLost) - before.sum(mLeaderLost)

	f := c.checkHolds(r, s.wait(), skus)
	r.recovered(k.leadBy)
	r.Detail = fmt.Sprintf("leader %s stopped %dms; %s; continued, it counted %g lost leases, %g sweeper refusals and %g fence rejections",
		x, paused.Milliseconds(), k, lost, refused, fenced)
	checkTakeover(t, k, "leader stopped")
	if lost == 0 && refused == 0 {
		t.Errorf("%s, stopped past its lease, counted no lost lease and no refused write", x)
	}
	if f.Expired == 0 || f.Confirmed == 0 {
		t.Errorf("the stream proves little: %s", f)
	}
}

// The sweeper's leader killed (SIGKILL) while holds fall due: another replica
// leads and sweeps within one lease (I5 for the sweeper), and every hold is
// swept in time (I6). Two of the four SKUs are stocked in three locations
// (40 units moved to each of east and west), and the stream's lines of them
// name locations, refuse a split or are split (locatedLines): the holds'
// checks run on located SKUs and on SKUs of one location at once.
func TestSweeperLeaderKilled(t *testing.T) {
	r := &result{Fault: "sweeper-kill"}
	record(t, r)
	c := newHoldsCluster(t)
	skus := c.stockSKUs("sk", 4, 150)
	c.addLocations()
	c.locate(skus[:2], 40)
	s := c.startLocatedHoldStream(newHoldBook(), skus, map[string]bool{skus[0]: true, skus[1]: true}, streamFor, 6)
	x := c.waitSweeping()

	t0 := time.Now()
	c.kill(x)
	k := c.watchTakeover(x, t0, 0, 10*time.Second)
	c.restart(x)

	f := c.checkHolds(r, s.wait(), skus)
	r.recovered(k.leadBy)
	r.Detail = fmt.Sprintf("leader %s killed; %s; restarted; %s; %s", x, k, c.locatedFigures(skus[0], 0, 0), c.locatedFigures(skus[1], 0, 0))
	checkTakeover(t, k, "leader killed")
	if f.Expired == 0 || f.Confirmed == 0 {
		t.Errorf("the stream proves little: %s", f)
	}
}

// The private redis-server killed while holds fall due, and started empty on
// its port two leases later: the sweeper's lease, the SKUs' locks and their
// fencing counters are gone. The holds that fell due meanwhile must be swept
// within sweepBound of Redis answering again, and none twice.
func TestHoldsExpireDuringRedisRestart(t *testing.T) {
	r := &result{Fault: "holds-redis-restart"}
	record(t, r)
	c := newHoldsCluster(t)
	skus := c.stockSKUs("sr", 4, 200)
	s := c.startHoldStream(skus, streamFor, 6)
	c.waitSweeping()

	// A burst of holds, due one holdTTL from now: while Redis is down.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 5 {
		wg.Go(func() {
			for i := range 6 {
				s.book.placeHold(ctx, c.lb.url, map[string]int{skus[(w+i)%len(skus)]: 1}, holdTTL, fmt.Sprintf("%s-burst-%d-%d", c.id, w, i))
			}
		})
	}
	wg.Wait()
	from := time.Now()
	c.redis.Kill()
	hold(2 * lease) // Redis down: the burst falls due meanwhile
	c.redis.Restart(t)
	to := time.Now()
	var dueDuring int
	if err := c.db.QueryRowContext(ctx, "SELECT count(*) FROM reservations WHERE expires_at > $1 AND expires_at <= $2", from, to).Scan(&dueDuring); err != nil {
		t.Fatal(err)
	}
	waitFor(t, sweepBound+20*time.Second, "the holds due while Redis was down swept", func() bool {
		var n int
		return c.db.QueryRowContext(ctx, "SELECT count(*) FROM reservations WHERE status = 'held' AND expires_at <= $1", to).Scan(&n) == nil && n == 0
	})
	swept := time.Since(to)

	f := c.checkHolds(r, s.wait(), skus, outage{from: from, to: to})
	r.recovered(swept)
	r.Detail = fmt.Sprintf("redis-server down %dms, then started empty; %d holds fell due meanwhile; every hold due by then swept %dms after it answered again",
		to.Sub(from).Milliseconds(), dueDuring, swept.Milliseconds())
	if dueDuring == 0 {
		t.Errorf("no hold fell due while Redis was down: the test proves nothing")
	}
	if swept > sweepBound {
		t.Errorf("I6: the holds due while Redis was down were swept only %s after it answered again (bound %s)", swept, sweepBound)
	}
	if f.Expired == 0 {
		t.Errorf("no hold expired: %s", f)
	}
}

// Many holds (200, of 1 to 2s, in waves of 25 on 16 SKUs), each confirmed so
// as to reach the database at about its expiry (from 300ms before to 100ms
// after, sent earlier by the median request's time on this machine), through
// the balancer, and one in five confirmed twice at once through two replicas,
// while the sweeper expires the others: every hold ends confirmed into one
// order, or expired with none, never both; the units sold are those of the
// confirmed holds' orders. Waves and 16 SKUs keep the confirms within what the
// SKUs' locks pass on a loaded 2-core machine (TestConfirmBurstOnFewSKUs is
// the burst that does not).
func TestConfirmRacesExpiry(t *testing.T) {
	r := &result{Fault: "confirm-vs-expiry"}
	record(t, r)
	confirmRace(t, r, 16, 25, false)
}

// The same race as TestConfirmRacesExpiry, as one burst: the 200 holds aimed
// at one instant on 4 SKUs. Confirms were not batched then, so each took its SKUs'
// locks on its own and a SKU's confirms queued behind each other; so the burst's
// confirms are sent from the lock wait (plus 300ms) before the expiry to 100ms
// after: the head of each queue is decided before the expiry and its tail
// after, however slow the machine. Sent in the 400ms before the expiry only,
// as the race is, a loaded CI run had none confirmed (1 to 9 in 200 on a quiet
// machine), and the test failed for it. When the sweeper's batch took the
// locks of all its SKUs at once it waited behind the queues: the last holds
// were swept 6 to 10 s after their expiry in three runs. It now expires by SKU
// set and goes on past a busy one (2.1 s in the run after the fix).
func TestConfirmBurstOnFewSKUs(t *testing.T) {
	r := &result{Fault: "confirm-burst"}
	record(t, r)
	confirmRace(t, r, 4, 200, true)
}

// confirmRace places 200 holds on nSKUs SKUs in waves of wave holds, and
// confirms each so as to reach the database at about its expiry. Aimed, every
// hold of a wave aims its expiry at one instant, 4s after the wave starts (time
// to place them all on a loaded machine), and its confirms are spread over the
// lock wait before it.
func confirmRace(t *testing.T, r *result, nSKUs, wave int, aimed bool) {
	const holds = 200
	c := newHoldsCluster(t)
	skus := c.stockSKUs("cr", nSKUs, 1000)
	book := newHoldBook()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	var rngMu sync.Mutex
	draw := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }
	doubles := 0
	var leads []string
	before := 300 * time.Millisecond // a confirm's aim before its hold's expiry
	if aimed {
		before += lockWait
	}
	for first := 0; first < holds; first += wave {
		// Placed by 8 clients at once, of 1 to 2s each.
		due := time.Now().Add(4 * time.Second)
		placed := make(chan *heldAs, wave)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := first + w; i < min(first+wave, holds); i += 8 {
					units := map[string]int{skus[draw(len(skus))]: 1 + draw(3)}
					if i%4 == 0 {
						units[skus[draw(len(skus))]] = 1 + draw(3) // sometimes two SKUs
					}
					ttl := time.Second + time.Duration(draw(1000))*time.Millisecond
					if aimed {
						ttl = min(max(time.Until(due), time.Second), 4*time.Second).Truncate(time.Millisecond)
					}
					if h := book.placeHold(ctx, c.lb.url, units, ttl, fmt.Sprintf("%s-cr-%d", c.id, i)); h != nil {
						placed <- h
					}
				}
			})
		}
		wg.Wait()
		close(placed)

		// Each confirm is sent so as to reach the database from 300ms (aimed:
		// the lock wait and 300ms) before its hold's expiry to 100ms after, as
		// far as a request's time on this machine now tells (the median confirm
		// so far; the median placing before any); one in five twice at once,
		// straight to two replicas.
		lead := min(book.median(), time.Second)
		leads = append(leads, strconv.FormatInt(lead.Milliseconds(), 10))
		i := first
		for h := range placed {
			at := h.expires.Add(time.Duration(draw(int((before+100*time.Millisecond)/time.Millisecond)))*time.Millisecond - before - lead)
			double := i%5 == 0
			if double {
				doubles++
			}
			reps := c.all()
			a, b := reps[i%len(reps)], reps[(i+1)%len(reps)]
			wg.Go(func() {
				select { // the client's moment to pay
				case <-ctx.Done():
					return
				case <-time.After(time.Until(at)):
				}
				if !double {
					book.confirm(ctx, c.lb.url, h)
					return
				}
				var both sync.WaitGroup
				both.Go(func() { book.confirm(ctx, a.url, h) })
				both.Go(func() { book.confirm(ctx, b.url, h) })
				both.Wait()
			})
			i++
		}
		wg.Wait()
	}

	f := c.checkHolds(r, book, skus)
	if f.Released > 0 {
		t.Errorf("%d holds released: none was asked to be", f.Released)
	}
	if f.Confirmed+f.Expired != f.Placed || f.Placed != len(book.holds) {
		t.Errorf("holds: %s, %d answered 201 to their placing", f, len(book.holds))
	}
	if f.Confirmed == 0 || f.Expired == 0 {
		t.Errorf("the race was not run: %s", f)
	}
	// The units sold are the confirmed holds' orders' (no other order here),
	// and those the clients were answered.
	answered := map[string]int64{}
	twice := 0
	for _, h := range book.holds {
		if len(h.orders) > 0 {
			for sku, q := range h.units {
				answered[sku] += int64(q)
			}
		}
		if len(h.orders) > 1 {
			twice++
		}
	}
	for _, sku := range skus {
		var sold, ordered, confirmedUnits int64
		if err := c.db.QueryRowContext(ctx, `SELECT (SELECT sold FROM skus WHERE sku = $1),
			  (SELECT COALESCE(SUM(ol.quantity), 0) FROM order_lines ol JOIN orders o ON o.id = ol.order_id WHERE ol.sku = $1 AND o.reservation_id IS NOT NULL),
			  (SELECT COALESCE(SUM(rl.quantity), 0) FROM reservation_lines rl JOIN reservations h ON h.id = rl.reservation_id WHERE rl.sku = $1 AND h.status = 'confirmed')`,
			sku).Scan(&sold, &ordered, &confirmedUnits); err != nil {
			t.Fatal(err)
		}
		if sold != ordered || sold != confirmedUnits || sold != answered[sku] {
			t.Errorf("%s: sold %d, in the confirmed holds' orders %d, held by the confirmed holds %d, answered 201 to the clients %d",
				sku, sold, ordered, confirmedUnits, answered[sku])
		}
	}
	r.Detail = fmt.Sprintf("%d holds on %d SKUs in waves of %d, each confirmed to reach the database from %s before its expiry to 100ms after (sent %sms earlier, wave by wave: the median request); %d confirmed, %d expired; %d confirmed twice at once through two replicas, %d of them answered the one order twice",
		f.Placed, nSKUs, wave, before, strings.Join(leads, "/"), f.Confirmed, f.Expired, doubles, twice)
}

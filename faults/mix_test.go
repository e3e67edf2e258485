//go:build faults

package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The faults of the other tests, mixed at random for STOCKGUARD_FAULTS_DURATION
// (20s by default) under the load, one after another: the seed is printed and
// STOCKGUARD_FAULTS_SEED replays the same sequence of faults, targets and
// lengths (not the same interleavings: the machine schedules those). Clients
// that lose answers and retry run all along.
func TestSeededFaultMix(t *testing.T) { seededMix(t, "mix", false) }

// The same mix with the hot SKU stocked in three locations (issue 41): once
// the load runs, 40 units are moved to each of east and west, which
// allocation takes first, and an operator goes on moving a unit or two into
// them every 100ms, so that the load's lines split over the three as they
// run out. Verified as the mix is, and per location in the database.
func TestSeededFaultMixLocations(t *testing.T) { seededMix(t, "mix-locations", true) }

func seededMix(t *testing.T, fault string, located bool) {
	seed, d := mixSeed(t), mixDuration(t)
	if located {
		// Half the mix's faults: the plain mix has the rest, and the
		// suite's time is CI's.
		d = max(d/2, 5*time.Second)
	}
	t.Logf("STOCKGUARD_FAULTS_SEED=%d STOCKGUARD_FAULTS_DURATION=%s", seed, d)
	r := &result{Fault: fault, Seed: strconv.FormatUint(seed, 10)}
	record(t, r)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	c := newCluster(t, clusterOptions{replicas: 3, links: true})
	if located {
		c.addLocations()
	}
	load := c.startLoad(d+5*time.Second, loadVUs)
	start := time.Now()
	load.waitTraffic(100)

	p := newRetrier(c, 50)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.run(ctx, 400, 150*time.Millisecond) })
	var moved, short int
	if located {
		c.locate([]string{c.hot}, 40)
		wg.Go(func() { moved, short = c.feedLocations(ctx, c.hot, 1000, 100*time.Millisecond, seed) })
	}

	kinds := []string{"pause", "kill", "redis-restart", "redis-stall", "link-slow", "link-cut", "link-reset", "db-terminate"}
	count := map[string]int{}
	worst := map[string]time.Duration{}
	var log []string
	deadline := start.Add(d)
	// A fault takes at most three leases, plus its recovery: start one only
	// while there is time for it.
	for i := 0; i < 100 && time.Until(deadline) > 4*lease; i++ {
		kind := kinds[rng.IntN(len(kinds))]
		idx := rng.IntN(3)
		length := lease + time.Duration(rng.Int64N(int64(2*lease))) // one to three leases
		inWrite := rng.IntN(2) == 0
		began := time.Since(start)
		var recovery time.Duration
		var note string
		switch kind {
		case "pause":
			var x *replica
			if !inWrite {
				x = c.all()[idx]
			}
			f := c.pauseHolder(x, length)
			recovery, note = f.recovery, f.String()
			if recovery > lease+recoverySlack {
				t.Errorf("the SKU was blocked %s by a stopped replica (%s)", recovery, note)
			}
		case "kill":
			var x *replica
			if !inWrite {
				x = c.all()[idx]
			}
			recovery, note = c.killHolder(x)
			if recovery > lease+recoverySlack {
				t.Errorf("I5: the SKU was blocked %s after a holder died (%s)", recovery, note)
			}
		case "redis-restart":
			f := c.restartRedis()
			recovery, note = f.recovery, f.String()
		case "redis-stall":
			recovery, note = c.stallRedis(length)
		case "link-slow", "link-cut", "link-reset":
			f := c.faultLink(strings.TrimPrefix(kind, "link-"), idx, length, inWrite)
			recovery, note = f.recovery, f.String()
		case "db-terminate":
			var n int
			n, recovery = c.terminateMidWrite(idx)
			note = fmt.Sprintf("%d sessions of replica %d ended inside its write; it decided again %dms after", n, idx, recovery.Milliseconds())
		}
		count[kind]++
		worst[kind] = max(worst[kind], recovery)
		log = append(log, fmt.Sprintf("%5.1fs %s: %s", began.Seconds(), kind, note))
		hold(time.Duration(rng.Int64N(int64(lease)))) // a random gap before the next fault
	}
	cancel()
	wg.Wait()
	t.Logf("faults injected:\n%s", strings.Join(log, "\n"))

	c.verify(r, load.wait())
	r.Detail = p.check(context.Background())
	samples, pairs := c.overlap.seen()
	r.Overlap = fmt.Sprintf("%d DB samples of a write waiting on another replica's (%s)", samples, pairs)
	var names []string
	for k := range count {
		names = append(names, k)
	}
	slices.Sort(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s×%d (worst recovery %dms)", k, count[k], worst[k].Milliseconds()))
		r.recovered(worst[k])
	}
	r.Detail = strings.Join(parts, ", ") + "; " + r.Detail
	if located {
		r.Detail += "; " + c.locatedFigures(c.hot, moved, short)
	}
	if len(log) == 0 {
		t.Errorf("no fault was injected in %s", d)
	}
}

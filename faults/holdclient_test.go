//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Holds, driven by the tests' own clients: the load generator places orders
// only. Every request goes through the balancer unless a replica is named, and
// is asked again on a 5xx or a lost answer (a replica stopped, killed, or
// without Redis), with the same Idempotency-Key where it has one, until a
// definite answer or its deadline.

// The holds tests' settings.
const (
	// sweepInterval is the replicas' STOCKGUARD_SWEEP_INTERVAL: short, so that
	// the sweeper's lag is small against the lease it is measured with.
	sweepInterval = 200 * time.Millisecond
	holdTTL       = time.Second // the stream's holds
	// holdBound is I6's bound past a hold's expiry: one sweep interval and one
	// lease (the leader died or stopped just before it), plus recoverySlack (the
	// waiters' poll for a lease nobody released, a loaded machine).
	holdBound = sweepInterval + lease + recoverySlack
	// sweepBound is what the tests hold the sweeper to: holdBound, plus the lock
	// wait, since its expiry takes the SKUs' locks behind the requests that hold
	// them, as any request does (holds swept later than holdBound are counted).
	sweepBound = holdBound + lockWait
	// askAgainFor bounds a client's retries of one request.
	askAgainFor = 20 * time.Second
)

// The sweeper's metrics.
const (
	mLeader        = "stockguard_sweeper_leader"
	mSweepRefusals = "stockguard_sweeper_refusals_total"
	mHolds         = "stockguard_holds_total"
	expiredEvent   = `event="expired"`
)

// newHoldsCluster starts three replicas that sweep every sweepInterval. When
// the test fails, the sweeper's lines of every replica's log are shown.
func newHoldsCluster(t *testing.T) *cluster {
	t.Helper()
	c := newCluster(t, clusterOptions{replicas: 3, env: []string{"STOCKGUARD_SWEEP_INTERVAL=" + sweepInterval.String()}})
	t.Cleanup(func() { // before stopAll: the logs are still being written
		if !t.Failed() {
			return
		}
		c.mu.Lock()
		every := append(append([]*replica(nil), c.replicas...), c.retired...)
		c.mu.Unlock()
		for _, r := range every {
			b, _ := os.ReadFile(r.logPath)
			var lines []string
			for l := range strings.Lines(string(b)) {
				if strings.Contains(l, "sweeper") {
					lines = append(lines, l)
				}
			}
			t.Logf("%s: %d sweeper lines in its log, the last ones:\n%s", r, len(lines), strings.Join(lines[max(0, len(lines)-20):], ""))
		}
	})
	return c
}

// heldAs is what a client learnt of one hold.
type heldAs struct {
	id      string
	expires time.Time
	units   map[string]int // by SKU
	orders  []string       // order ids answered to its confirms (201, replays included)
	gone    int            // 410 answers to its confirms
	freed   bool           // its release answered 200, or 409 reservation-released to a retry
	others  []string       // any other definite answer to a confirm or a release
}

// holdBook is every hold and order the clients of one test placed, and how
// their requests went.
type holdBook struct {
	mu          sync.Mutex
	holds       map[string]*heldAs
	orders      []string // plain orders acknowledged (201)
	short       int      // holds and orders refused for want of stock (409)
	failed      int      // 5xx answers and lost answers, each asked again
	undecided   int      // requests with no definite answer by their deadline
	confirmSent int
	placing     []time.Duration // how long each hold placed took, asked again or not
	confirming  []time.Duration // how long each confirm took to a definite answer
	unknown     int             // 503 outcome-unknown answers, each asked again
	// patience bounds a request's retries: askAgainFor, or longer where the
	// fault outlasts it (a database failover).
	patience time.Duration
}

func newHoldBook() *holdBook { return &holdBook{holds: map[string]*heldAs{}, patience: askAgainFor} }

func (b *holdBook) add(h *heldAs) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holds[h.id] = h
}

func (b *holdBook) update(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
}

// ask posts body to base+path, asking again with the same key (none when
// key is "") on a 5xx or a lost answer, until a definite answer or the
// deadline; ok is false when none came.
func (b *holdBook) ask(ctx context.Context, base, path, body, key string) (reply, bool) {
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	b.mu.Lock()
	deadline := time.Now().Add(b.patience)
	b.mu.Unlock()
	for {
		rctx, cancel := context.WithTimeout(ctx, clientTimeout)
		rep, err := post(rctx, base+path, body, hdr)
		cancel()
		if err == nil && rep.status < 500 {
			return rep, true
		}
		unknown := err == nil && rep.status == http.StatusServiceUnavailable && strings.Contains(string(rep.body), "problems.md#outcome-unknown")
		b.update(func() {
			b.failed++
			if unknown {
				b.unknown++
			}
		})
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.update(func() { b.undecided++ })
			return rep, false
		}
		hold(100 * time.Millisecond) // asking again, with a deadline
	}
}

// median is the median time a confirm took, or a placing before any confirm:
// what a request on the holds' lock path takes on this machine now.
func (b *holdBook) median() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	d := slices.Clone(b.confirming)
	if len(d) == 0 {
		d = slices.Clone(b.placing)
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}

func itemsJSON(units map[string]int) string {
	var parts []string
	for sku, q := range units {
		parts = append(parts, fmt.Sprintf(`{"sku":%q,"quantity":%d}`, sku, q))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// placeHold asks for a hold of units for ttl; nil when refused or undecided.
func (b *holdBook) placeHold(ctx context.Context, base string, units map[string]int, ttl time.Duration, key string) *heldAs {
	return b.placeHoldItems(ctx, base, itemsJSON(units), units, ttl, key)
}

// placeHoldItems is placeHold of lines items (JSON), which ask for units.
func (b *holdBook) placeHoldItems(ctx context.Context, base, items string, units map[string]int, ttl time.Duration, key string) *heldAs {
	start := time.Now()
	rep, ok := b.ask(ctx, base, "/v1/reservations", fmt.Sprintf(`{"items":%s,"ttl":%q}`, items, ttl.String()), key)
	switch {
	case !ok:
		return nil
	case rep.status == http.StatusConflict:
		b.update(func() { b.short++ })
		return nil
	case rep.status != http.StatusCreated:
		b.update(func() { b.undecided++ })
		return nil
	}
	var out struct {
		ID        string    `json:"id"`
		Status    string    `json:"status"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(rep.body, &out); err != nil || out.ID == "" {
		b.update(func() { b.undecided++ })
		return nil
	}
	h := &heldAs{id: out.ID, expires: out.ExpiresAt, units: units}
	b.add(h)
	b.update(func() { b.placing = append(b.placing, time.Since(start)) })
	return h
}

// confirm confirms every unit of h, through base, with no key: a retry of a
// confirmed hold gets its order again, replayed.
func (b *holdBook) confirm(ctx context.Context, base string, h *heldAs) {
	b.update(func() { b.confirmSent++ })
	start := time.Now()
	rep, ok := b.ask(ctx, base, "/v1/reservations/"+h.id+"/confirm", "{}", "")
	if !ok {
		return
	}
	b.update(func() { b.confirming = append(b.confirming, time.Since(start)) })
	var o struct {
		ID            string `json:"id"`
		ReservationID string `json:"reservation_id"`
	}
	b.update(func() {
		switch {
		case rep.status == http.StatusCreated && json.Unmarshal(rep.body, &o) == nil && o.ID != "" && o.ReservationID == h.id:
			h.orders = append(h.orders, o.ID)
		case rep.status == http.StatusGone:
			h.gone++
		default:
			h.others = append(h.others, fmt.Sprintf("confirm: %d %s", rep.status, rep.body))
		}
	})
}

// release releases h through base.
func (b *holdBook) release(ctx context.Context, base string, h *heldAs) {
	rep, ok := b.ask(ctx, base, "/v1/reservations/"+h.id+"/release", "{}", "")
	if !ok {
		return
	}
	b.update(func() {
		switch {
		case rep.status == http.StatusOK,
			rep.status == http.StatusConflict && strings.Contains(string(rep.body), "problems.md#reservation-released"): // a retry of a release whose answer was lost
			h.freed = true
		case rep.status == http.StatusGone: // expired before the release came: a definite answer
		default:
			h.others = append(h.others, fmt.Sprintf("release: %d %s", rep.status, rep.body))
		}
	})
}

// placeOrderItems places a plain order of lines items (JSON).
func (b *holdBook) placeOrderItems(ctx context.Context, base, items, key string) {
	rep, ok := b.ask(ctx, base, "/v1/orders", fmt.Sprintf(`{"items":%s}`, items), key)
	if !ok {
		return
	}
	var o struct {
		ID string `json:"id"`
	}
	b.update(func() {
		switch {
		case rep.status == http.StatusCreated && json.Unmarshal(rep.body, &o) == nil && o.ID != "":
			b.orders = append(b.orders, o.ID)
		case rep.status == http.StatusConflict:
			b.short++
		default:
			b.undecided++
		}
	})
}

// stockSKUs creates n SKUs of the test's own with stock units each.
func (c *cluster) stockSKUs(prefix string, n, stock int) []string {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	skus := make([]string, n)
	for i := range skus {
		skus[i] = fmt.Sprintf("%s%s-%d", prefix, c.id, i)
		rep, err := post(ctx, c.lb.url+"/v1/skus/"+skus[i]+"/restock", fmt.Sprintf(`{"quantity":%d}`, stock),
			map[string]string{"Authorization": "Bearer " + adminToken})
		if err != nil || (rep.status != http.StatusOK && rep.status != http.StatusCreated) {
			t.Fatalf("restock %s: %d %v %s", skus[i], rep.status, err, rep.body)
		}
	}
	return skus
}

// holdStream is clients placing holds of holdTTL and plain orders on a few
// SKUs through the balancer, at their own pace: of the holds, a quarter are
// confirmed and one in ten released before they expire, the rest left to the
// sweeper; three operations in ten are plain orders, which compete for the
// same stock.
type holdStream struct {
	c    *cluster
	book *holdBook
	wg   sync.WaitGroup
	stop context.CancelFunc
}

func (c *cluster) startHoldStream(skus []string, d time.Duration, workers int) *holdStream {
	return c.startHoldStreamWith(newHoldBook(), skus, d, workers)
}

// startHoldStreamWith is startHoldStream recording into book.
func (c *cluster) startHoldStreamWith(book *holdBook, skus []string, d time.Duration, workers int) *holdStream {
	return c.startLocatedHoldStream(book, skus, nil, d, workers)
}

// startLocatedHoldStream is startHoldStreamWith whose lines of the SKUs in
// located (stocked in the three locations) name locations or refuse a split
// (locatedLines).
func (c *cluster) startLocatedHoldStream(book *holdBook, skus []string, located map[string]bool, d time.Duration, workers int) *holdStream {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	s := &holdStream{c: c, book: book, stop: cancel}
	c.t.Cleanup(func() { cancel(); s.wg.Wait() })
	for w := range workers {
		s.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			// An operation begun is followed to its answer even past the stream's end.
			opCtx := context.WithoutCancel(ctx)
			for i := 0; i < 5000 && ctx.Err() == nil; i++ {
				units := map[string]int{skus[rng.IntN(len(skus))]: 1 + rng.IntN(3)}
				items := itemsJSON(units)
				for sku := range units {
					if located[sku] {
						items, units = locatedLines(rng, sku, skus, located)
					}
				}
				key := fmt.Sprintf("%s-w%d-%d", c.id, w, i)
				if rng.IntN(10) < 3 {
					s.book.placeOrderItems(opCtx, c.lb.url, items, key)
				} else if h := s.book.placeHoldItems(opCtx, c.lb.url, items, units, holdTTL, key); h != nil {
					switch n := rng.IntN(20); {
					case n < 5:
						hold(time.Duration(rng.Int64N(int64(holdTTL / 2)))) // the shopper's time to pay
						s.book.confirm(opCtx, c.lb.url, h)
					case n < 7:
						hold(time.Duration(rng.Int64N(int64(holdTTL / 2)))) // the shopper's time to give up
						s.book.release(opCtx, c.lb.url, h)
					}
				}
				select { // the clients' own pace
				case <-ctx.Done():
				case <-time.After(40 * time.Millisecond):
				}
			}
		})
	}
	return s
}

// wait waits for the stream's end and its last answers.
func (s *holdStream) wait() *holdBook {
	s.wg.Wait()
	s.stop()
	return s.book
}

// leaders scrapes rs and returns those whose /metrics say they lead the sweeper.
func (c *cluster) leaders(rs []*replica) []*replica {
	var out []*replica
	for _, r := range rs {
		if m, err := c.scrape(r); err == nil && m.sum(mLeader) == 1 {
			out = append(out, r)
		}
	}
	return out
}

// waitLeader waits (at most within) for exactly one of rs to lead the sweeper.
func (c *cluster) waitLeader(rs []*replica, within time.Duration) *replica {
	var l []*replica
	waitFor(c.t, within, "one replica leading the sweeper", func() bool {
		l = c.leaders(rs)
		return len(l) == 1
	})
	return l[0]
}

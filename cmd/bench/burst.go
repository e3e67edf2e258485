package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The confirm burst of issue 31: the holds of a flash sale's shoppers, all
// due at one instant, and every shopper paying at once with the lock wait
// still to go. A confirm that waits its whole lock wait is still answered
// before its hold expires; how many are confirmed says whether the confirms
// pass the SKUs' locks as fast as they come.

// The burst's shape, as the (and the fault suite's
// TestConfirmBurstOnFewSKUs).
const (
	burstHolds    = 200
	burstSKUs     = 4
	burstTTL      = 4 * time.Second // from the first hold's placing: all aimed at one instant
	burstLockWait = 2 * time.Second // the service's default --lock-wait: the confirms' lead on the expiry
	burstPlacers  = 50              // holds placed at once
)

// BurstResult is one burst.
type BurstResult struct {
	Holds  int `json:"holds"`
	SKUs   int `json:"skus"`
	Placed int `json:"placed"` // holds answered 201
	// Confirmed are the confirms answered 201: confirmed before the expiry.
	Confirmed int64 `json:"confirmed"`
	// Others are the other confirms' answers, by status, or "error".
	Others map[string]int64 `json:"others,omitempty"`
	PlaceS float64          `json:"place_s"` // from the first hold sent to the last answered
	// SpreadMS is the latest expires_at less the earliest.
	SpreadMS float64 `json:"expiry_spread_ms"`
	// LeadS is how long before the earliest expires_at the confirms were sent
	// (the lock wait, unless placing took longer).
	LeadS float64 `json:"lead_s"`
	// LastS is the last confirm's answer, from the confirms' sending.
	LastS      float64 `json:"last_answer_s"`
	Oversold   int64   `json:"oversold"`
	Consistent bool    `json:"consistent"`
}

// bursts runs n bursts on one cluster of the default strategy, each on SKUs of
// its own and ending with the audit.
func (b *holdsBench) bursts(ctx context.Context, n int) ([]BurstResult, error) {
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, nil, b.log)
	if err != nil {
		return nil, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	d, err := newDriver(ctx, c.lb.URL, burstHolds, b.log)
	if err != nil {
		return nil, err
	}
	defer d.close()
	out := make([]BurstResult, 0, n)
	for i := range n {
		r, err := d.burst(ctx, Workload{Name: "burst" + strconv.Itoa(i), SKUs: burstSKUs, Popularity: "uniform", Stock: 1000})
		if err != nil {
			return nil, fmt.Errorf("burst %d: %w", i+1, err)
		}
		b.log.Info("holds: confirm burst", "n", i+1, "placed", r.Placed, "confirmed", r.Confirmed, "others", failures(int64(r.Placed)-r.Confirmed, r.Others),
			"place_s", fmt.Sprintf("%.2f", r.PlaceS), "lead_s", fmt.Sprintf("%.2f", r.LeadS), "last_answer_s", fmt.Sprintf("%.2f", r.LastS),
			"oversold", r.Oversold, "consistent", r.Consistent)
		out = append(out, r)
	}
	return out, nil
}

// burstHold is a hold the burst placed.
type burstHold struct {
	id      string
	expires time.Time
}

// burst places the holds, one unit each on w's SKUs in turn, each with the
// ttl left to one instant burstTTL after the first is sent, then sends every
// confirm at once, the lock wait before the earliest expiry, and audits.
func (d *driver) burst(ctx context.Context, w Workload) (BurstResult, error) {
	res := BurstResult{Holds: burstHolds, SKUs: w.SKUs}
	if err := d.seed(ctx, w); err != nil {
		return res, err
	}
	skus := skuNames(w)
	start := time.Now()
	due := start.Add(burstTTL)
	holds := make([]burstHold, burstHolds)
	errs := make([]error, burstHolds)
	var wg sync.WaitGroup
	next := make(chan int, burstHolds)
	for i := range burstHolds {
		next <- i
	}
	close(next)
	for range burstPlacers {
		wg.Go(func() {
			for i := range next {
				ttl := min(max(time.Until(due), time.Second), burstTTL).Truncate(time.Millisecond)
				holds[i], errs[i] = d.placeHold(ctx, skus[i%len(skus)], ttl)
			}
		})
	}
	wg.Wait()
	res.PlaceS = time.Since(start).Seconds()
	var placed []burstHold
	for i, h := range holds {
		if errs[i] != nil {
			return res, errs[i]
		}
		if h.id != "" {
			placed = append(placed, h)
		}
	}
	res.Placed = len(placed)
	if len(placed) == 0 {
		return res, fmt.Errorf("no hold placed of %d", burstHolds)
	}
	first := slices.MinFunc(placed, func(a, b burstHold) int { return a.expires.Compare(b.expires) }).expires
	last := slices.MaxFunc(placed, func(a, b burstHold) int { return a.expires.Compare(b.expires) }).expires
	res.SpreadMS = float64(last.Sub(first).Microseconds()) / 1000

	// Every confirm waits at the gate, which opens the lock wait before the
	// earliest expiry (at once when placing took longer than that).
	gate := make(chan struct{})
	statuses := make([]string, len(placed))
	answered := make([]time.Time, len(placed))
	for i, h := range placed {
		wg.Go(func() {
			<-gate
			status, _, err := d.call(ctx, http.MethodPost, "/v1/reservations/"+h.id+"/confirm", nil, newKey(), false)
			answered[i] = time.Now()
			switch {
			case err != nil:
				statuses[i] = "error"
			default:
				statuses[i] = strconv.Itoa(status)
			}
		})
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(first.Add(-burstLockWait))):
	}
	sent := time.Now()
	res.LeadS = first.Sub(sent).Seconds()
	close(gate)
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	for i, s := range statuses {
		if s == strconv.Itoa(http.StatusCreated) {
			res.Confirmed++
		} else {
			res.Others = addCounts(res.Others, map[string]int64{s: 1})
		}
		res.LastS = max(res.LastS, answered[i].Sub(sent).Seconds())
	}
	var err error
	res.Oversold, res.Consistent, err = d.audit(ctx)
	return res, err
}

// placeHold holds one unit of sku for ttl; a hold not answered 201 is the
// zero burstHold, not an error (the burst counts what was placed).
func (d *driver) placeHold(ctx context.Context, sku string, ttl time.Duration) (burstHold, error) {
	body := fmt.Appendf(nil, `{"items":[{"sku":%q,"quantity":1}],"ttl":%q}`, sku, ttl.String())
	status, b, err := d.call(ctx, http.MethodPost, "/v1/reservations", body, newKey(), false)
	if err != nil {
		if ctx.Err() != nil {
			return burstHold{}, ctx.Err()
		}
		d.log.Warn("holds: a burst's hold not answered", "err", err)
		return burstHold{}, nil
	}
	if status != http.StatusCreated {
		d.log.Warn("holds: a burst's hold refused", "status", status, "answer", string(b))
		return burstHold{}, nil
	}
	var h struct {
		ID        string    `json:"id"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.ID == "" || h.ExpiresAt.IsZero() {
		return burstHold{}, fmt.Errorf("hold answer %q: %w", b, err)
	}
	return burstHold{id: h.ID, expires: h.ExpiresAt}, nil
}

// burstSummary is the bursts' median confirmed and their range.
func burstSummary(rs []BurstResult) (medianConfirmed float64, lo, hi int64) {
	xs := make([]float64, len(rs))
	lo, hi = int64(burstHolds), 0
	for i, r := range rs {
		xs[i] = float64(r.Confirmed)
		lo, hi = min(lo, r.Confirmed), max(hi, r.Confirmed)
	}
	return median(xs), lo, hi
}

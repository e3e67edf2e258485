package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The holds benchmark, on the default strategy: orders/s, holds/s and
// confirms/s on the hot SKU and on zipf, each kind on fresh tables and
// replicas, then the sweeper's cost: many holds expiring at once while orders
// go on buying the same SKU.

// HoldsResults are what the holds benchmark measured.
type HoldsResults struct {
	Command  string        `json:"command"`
	When     string        `json:"when"`
	Commit   string        `json:"commit"`
	Strategy string        `json:"strategy"`
	Replicas int           `json:"replicas"`
	VUs      int           `json:"vus"`
	Repeats  int           `json:"repeats"`
	Duration time.Duration `json:"duration_ns"`
	Runs     []OpRun       `json:"runs"`
	Points   []HoldsPoint  `json:"points"`
	Sweep    *SweepResult  `json:"sweep,omitempty"`
	// Bursts are the confirm bursts, one per repeat (none in a holds.json
	// from before they were measured).
	Bursts []BurstResult `json:"bursts,omitempty"`
}

// HoldsPoint is one workload's medians and the ratios to orders within the run.
type HoldsPoint struct {
	Workload     string           `json:"workload"`
	Title        string           `json:"title"`
	Orders       float64          `json:"orders_per_s"`
	Holds        float64          `json:"holds_per_s"`
	Confirms     float64          `json:"confirms_per_s"`
	HoldRatio    float64          `json:"hold_to_order"`
	ConfirmRatio float64          `json:"confirm_to_order"`
	OrderP99     float64          `json:"order_p99_ms"`
	HoldP99      float64          `json:"hold_p99_ms"`
	ConfirmP99   float64          `json:"confirm_p99_ms"`
	Failed       int64            `json:"failed"`
	FailedBy     map[string]int64 `json:"failed_by"` // by HTTP status, or "error"
	Oversold     int64            `json:"oversold"`
	Consistent   bool             `json:"consistent"`
}

// SweepResult is the sweeper's cost: times are from the holds' expiry.
type SweepResult struct {
	Holds      int     `json:"holds"`
	InsertedBy string  `json:"inserted_by"`
	InsertS    float64 `json:"insert_s"`
	VUs        int     `json:"vus"`
	FirstS     float64 `json:"first_returned_s"` // expiry to the first units back in available
	DoneS      float64 `json:"all_swept_s"`      // expiry to reserved 0
	TimedOut   bool    `json:"timed_out"`
	HoldsPerS  float64 `json:"swept_per_s"` // holds expired per second, from the last reading of all reserved to none
	BeforeS    float64 `json:"before_window_s"`
	Before     float64 `json:"orders_per_s_before"`
	During     float64 `json:"orders_per_s_during"`
	After      float64 `json:"orders_per_s_after"`
	Ratio      float64 `json:"during_to_before"`
	Expired    int64   `json:"expired"`
	Oversold   int64   `json:"oversold"`
	Consistent bool    `json:"consistent"`
	// Timeline is orders/s per TimelineStep from TimelineFrom (s, from expiry).
	Timeline     []float64 `json:"timeline"`
	TimelineFrom float64   `json:"timeline_from_s"`
	TimelineStep float64   `json:"timeline_step_s"`
}

// holdWorkloads are the workloads holds are measured on, of those -workloads names.
var holdWorkloads = []string{"hot", "zipf"}

// holdTTL outlives every run: no hold of the throughput runs expires.
const holdTTL = 30 * time.Minute

type holdsBench struct {
	o    options
	bins topology.Binaries
	db   *gorm.DB
	log  *slog.Logger
	vus  int
	res  *HoldsResults
}

func measureHolds(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, log *slog.Logger, m Machine) (*HoldsResults, error) {
	b := &holdsBench{o: o, bins: bins, db: db, log: log, vus: o.holdsVUs, res: &HoldsResults{Command: o.command, When: m.When,
		Commit: m.Commit, Strategy: string(orders.DefaultStrategy), Replicas: o.replicas, VUs: o.holdsVUs,
		Repeats: o.profile.Repeats, Duration: o.profile.Duration}}
	var names []string
	for _, w := range o.workloads {
		if slices.Contains(holdWorkloads, w.Name) {
			names = append(names, w.Name)
		}
	}
	log.Info("holds: plan", "strategy", orders.DefaultStrategy, "vus", b.vus, "workloads", names,
		"runs", len(names)*3*o.profile.Repeats, "clusters", len(names)*2*o.profile.Repeats, "run_length", o.profile.Duration, "confirm_bursts", o.profile.Repeats, "sweep_holds", o.profile.SweepHolds)
	for _, w := range o.workloads {
		if !slices.Contains(holdWorkloads, w.Name) {
			continue
		}
		p := HoldsPoint{Workload: w.Name, Title: w.Title, Consistent: true}
		// Each repeat is a pair: orders, then holds and the confirms of those
		// holds, each on emptied tables and new replicas (the conditions of the
		// strategies' runs), one after the other, so that whatever else loads
		// the machine meanwhile weighs on both alike; the ratios are the
		// medians of the pairs' ratios.
		var runs []OpRun
		var holdRatios, confirmRatios []float64
		for i := range o.profile.Repeats {
			var pair []OpRun
			for _, ops := range [][]string{{"order"}, {"hold", "confirm"}} {
				rs, err := b.contender(ctx, w, ops, i, &p)
				if err != nil {
					return nil, fmt.Errorf("holds, %s, %v: %w", w.Name, ops, err)
				}
				pair = append(pair, rs...)
			}
			runs = append(runs, pair...)
			holdRatios = append(holdRatios, pair[1].PerSec/max(pair[0].PerSec, 1e-9))
			confirmRatios = append(confirmRatios, pair[2].PerSec/max(pair[0].PerSec, 1e-9))
		}
		b.res.Runs = append(b.res.Runs, runs...)
		of := func(op string) []OpRun {
			return slices.DeleteFunc(slices.Clone(runs), func(r OpRun) bool { return r.Op != op })
		}
		rate, p99 := func(r OpRun) float64 { return r.PerSec }, func(r OpRun) float64 { return r.P99 }
		p.Orders, p.OrderP99 = medianOf(of("order"), rate), medianOf(of("order"), p99)
		p.Holds, p.HoldP99 = medianOf(of("hold"), rate), medianOf(of("hold"), p99)
		p.Confirms, p.ConfirmP99 = medianOf(of("confirm"), rate), medianOf(of("confirm"), p99)
		p.HoldRatio, p.ConfirmRatio = median(holdRatios), median(confirmRatios)
		log.Info("holds: workload done", "workload", w.Name, "orders/s", int(p.Orders), "holds/s", int(p.Holds),
			"confirms/s", int(p.Confirms), "hold/order", fmt.Sprintf("%.2f", p.HoldRatio), "confirm/order", fmt.Sprintf("%.2f", p.ConfirmRatio),
			"failed", p.Failed)
		b.res.Points = append(b.res.Points, p)
	}
	bursts, err := b.bursts(ctx, o.profile.Repeats)
	if err != nil {
		return nil, fmt.Errorf("confirm burst: %w", err)
	}
	b.res.Bursts = bursts
	sw, err := b.sweep(ctx)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	b.res.Sweep = sw
	return b.res, nil
}

// contender runs each kind of request of ops once, in turn, on one cluster.
func (b *holdsBench) contender(ctx context.Context, w Workload, ops []string, repeat int, p *HoldsPoint) ([]OpRun, error) {
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, nil, b.log)
	if err != nil {
		return nil, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	d, err := newDriver(ctx, c.lb.URL, b.vus, b.log)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.seed(ctx, w); err != nil {
		return nil, err
	}
	pool := &holdPool{}
	var runs []OpRun
	for _, name := range ops {
		var o op
		switch name {
		case "order":
			o = d.orderOp(w)
		case "hold":
			o = d.holdOp(w, holdTTL, pool)
		case "confirm":
			o = d.confirmOp(pool)
		}
		// A warm-up, then ANALYZE, as in the strategies' runs: emptied tables
		// are planned as empty until told otherwise. Confirms use up the holds
		// just made, on tables warm by then.
		if name != "confirm" {
			drive(ctx, b.vus, time.Second, o, false)
		}
		if err := b.db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
			return nil, fmt.Errorf("analyze: %w", err)
		}
		r := drive(ctx, b.vus, b.o.profile.Duration, o, false)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.Workload, r.Op = w.Name, name
		b.log.Info("holds: run", "workload", w.Name, "op", name, "repeat", repeat+1, "ok/s", int(r.PerSec), "p99_ms", r.P99,
			"refused", r.Refused, "failed", failures(r.Failed, r.FailedBy), "holds_left", pool.left())
		if name == "confirm" && pool.left() == 0 {
			b.log.Warn("holds: the confirms ran out of holds before the run's end", "workload", w.Name, "seconds", r.Seconds)
		}
		runs = append(runs, r)
		p.Failed += r.Failed
		p.FailedBy = addCounts(p.FailedBy, r.FailedBy)
	}
	over, ok, err := d.audit(ctx)
	if err != nil {
		return nil, err
	}
	p.Oversold, p.Consistent = p.Oversold+over, p.Consistent && ok
	return runs, nil
}

// addCounts adds b's counts to a's.
func addCounts(a, b map[string]int64) map[string]int64 {
	if len(b) == 0 {
		return a
	}
	if a == nil {
		a = map[string]int64{}
	}
	for k, v := range b {
		a[k] += v
	}
	return a
}

func medianOf(runs []OpRun, f func(OpRun) float64) float64 {
	xs := make([]float64, len(runs))
	for i, r := range runs {
		xs[i] = f(r)
	}
	return median(xs)
}

// The sweep's timing.
const (
	sweepSetup   = 8 * time.Second        // replicas up, a warm-up and ANALYZE, before the window before expiry
	sweepPoll    = 50 * time.Millisecond  // how often reserved is read
	sweepAfter   = 2 * time.Second        // orders measured after the sweep
	sweepStep    = 250 * time.Millisecond // the timeline's resolution
	sweepPerHold = 2 * time.Millisecond   // the deadline's allowance per hold, beyond a fixed 30s
	// The insert's allowance per hold: the expiry is read before the holds are
	// written, and writing 100,000 takes seconds.
	sweepInsertPerHold = 50 * time.Microsecond
)

// sweep inserts the profile's holds on one SKU with SQL, all expiring at one
// instant, and measures how long the sweeper takes to return them while VUs
// order the same SKU, and the orders' rate during the sweep against before.
func (b *holdsBench) sweep(ctx context.Context) (*SweepResult, error) {
	n := b.o.profile.SweepHolds
	w := Workload{Name: "sweep", SKUs: 1, Popularity: "uniform", Stock: 100_000_000}
	sku := skuNames(w)[0]
	res := &SweepResult{Holds: n, VUs: b.vus, InsertedBy: "sql"}
	var expiry time.Time
	b.log.Info("sweep: inserting holds with SQL", "holds", n, "sku", sku)
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, func() error {
		t0 := time.Now()
		var err error
		expiry, err = insertHolds(ctx, b.db, sku, int64(w.Stock), n, sweepSetup+b.o.profile.SweepBefore+time.Duration(n)*sweepInsertPerHold)
		res.InsertS = time.Since(t0).Seconds()
		return err
	}, b.log)
	if err != nil {
		return nil, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	d, err := newDriver(ctx, c.lb.URL, b.vus, b.log)
	if err != nil {
		return nil, err
	}
	defer d.close()
	drive(ctx, b.vus, time.Second, d.orderOp(w), false)
	if err := b.db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	if left := time.Until(expiry); left < 3500*time.Millisecond {
		return nil, fmt.Errorf("the setup took too long: %s left before the holds expire, want 3.5s", left.Round(time.Millisecond))
	}
	deadline := time.Until(expiry) + 30*time.Second + time.Duration(n)*sweepPerHold
	b.log.Info("sweep: ordering the same SKU until the holds are swept", "vus", b.vus, "expiry_in", time.Until(expiry).Round(time.Millisecond),
		"deadline", deadline.Round(time.Second))

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	t := sweepTimes{start: time.Now(), expiry: expiry}
	loaded := make(chan OpRun, 1)
	go func() { loaded <- drive(loadCtx, b.vus, deadline+sweepAfter, d.orderOp(w), true) }()

	if res.TimedOut, err = b.watchSweep(ctx, sku, n, deadline, &t); err != nil {
		return nil, err
	}
	if !res.TimedOut {
		select {
		case <-ctx.Done():
		case <-time.After(sweepAfter):
		}
	}
	stopLoad()
	run := <-loaded
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if res.TimedOut {
		b.log.Warn("sweep: not done by the deadline", "holds", n, "deadline", deadline)
		t.done = time.Now()
	}
	if t.first.IsZero() {
		t.first = t.done
	}
	if t.full.IsZero() || t.full.After(t.first) {
		t.full = t.first
	}
	res.record(run, t, b.o.profile.SweepBefore)
	if err := b.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM reservations WHERE status = 'expired'").Row().Scan(&res.Expired); err != nil {
		return nil, fmt.Errorf("count expired: %w", err)
	}
	if res.Oversold, res.Consistent, err = d.audit(ctx); err != nil {
		return nil, err
	}
	b.log.Info("sweep: done", "holds", n, "first_returned_s", fmt.Sprintf("%.2f", res.FirstS), "all_swept_s", fmt.Sprintf("%.2f", res.DoneS),
		"timed_out", res.TimedOut, "orders/s_before", int(res.Before), "orders/s_during", int(res.During), "during/before",
		fmt.Sprintf("%.2f", res.Ratio), "expired", res.Expired, "consistent", res.Consistent)
	return res, nil
}

// sweepTimes are the sweep's moments: the load's start, the holds' expiry,
// the last reading of every hold still reserved (full: the sweep began
// after it), the first reading of fewer (first: it began by then), and the
// reading of none (done).
type sweepTimes struct {
	start, expiry, full, first, done time.Time
}

// watchSweep reads the SKU's reserved units every sweepPoll, under the load,
// until none is left (true) or deadline has passed (false), and notes full,
// first and done in t.
func (b *holdsBench) watchSweep(ctx context.Context, sku string, n int, deadline time.Duration, t *sweepTimes) (timedOut bool, err error) {
	tick := time.NewTicker(sweepPoll)
	defer tick.Stop()
	end := time.NewTimer(deadline)
	defer end.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-end.C:
			return true, nil
		case <-tick.C:
		}
		var reserved int64
		if err := b.db.WithContext(ctx).Raw("SELECT reserved FROM skus WHERE sku = ?", sku).Row().Scan(&reserved); err != nil {
			return false, fmt.Errorf("read reserved: %w", err)
		}
		now := time.Now()
		if reserved == int64(n) {
			t.full = now
		} else if t.first.IsZero() {
			t.first = now
		}
		if reserved == 0 {
			t.done = now
			return false, nil
		}
		if now.Sub(lastLog) >= 5*time.Second {
			lastLog = now
			b.log.Info("sweep: progress", "reserved", reserved, "since_expiry", now.Sub(t.expiry).Round(100*time.Millisecond))
		}
	}
}

// record fills in the sweep's rates and timeline from the load's completion
// times: orders/s in the window of before (at most) up to the expiry, while
// the holds were swept and after; apart from the measuring so that the
// arithmetic can be tested on its own.
func (res *SweepResult) record(run OpRun, t sweepTimes, before time.Duration) {
	rate := func(from, to time.Time) float64 { return run.rate(t.start, from, to) }
	from := t.expiry.Add(-before)
	if early := t.start.Add(1500 * time.Millisecond); from.Before(early) {
		from = early // the VUs' first requests open connections and wait for the first batches
	}
	res.BeforeS = t.expiry.Sub(from).Seconds()
	res.Before, res.During = rate(from, t.expiry), rate(t.full, t.done)
	if !res.TimedOut {
		res.After = rate(t.done, t.done.Add(sweepAfter))
	}
	res.Ratio = res.During / max(res.Before, 1e-9)
	res.FirstS, res.DoneS = t.first.Sub(t.expiry).Seconds(), t.done.Sub(t.expiry).Seconds()
	if res.TimedOut {
		res.DoneS = 0
	}
	if s := t.done.Sub(t.full).Seconds(); s > 0 && !res.TimedOut {
		res.HoldsPerS = float64(res.Holds) / s
	}
	// The timeline from the start of the window before expiry to the end.
	res.TimelineFrom, res.TimelineStep = -res.BeforeS, sweepStep.Seconds()
	ended := t.start.Add(time.Duration(run.Seconds * float64(time.Second)))
	for x := from; !x.Add(sweepStep).After(ended); x = x.Add(sweepStep) { // whole steps only
		res.Timeline = append(res.Timeline, rate(x, x.Add(sweepStep)))
	}
}

// insertHolds writes, in one transaction, a SKU with stock units and n holds of
// one unit of it, all expiring lead from now on the database's clock, as the
// service would have written them: the reservations and their lines, a ledger
// entry of kind hold each, and the units moved from available to reserved. It
// returns the holds' expiry. The holds' ids are not the service's (time and
// random bits) but sort the same way, and none of them is ever asked for.
func insertHolds(ctx context.Context, db *gorm.DB, sku string, stock int64, n int, lead time.Duration) (time.Time, error) {
	var expiry time.Time
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("INSERT INTO skus (sku, available, stocked, sold, reserved, fence, updated_at) VALUES (?, ?, ?, 0, ?, 0, now())",
			sku, stock-int64(n), stock, n).Error; err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO stock_ledger (sku, delta, kind, fence, created_at) VALUES (?, ?, 'restock', 0, now())", sku, stock).Error; err != nil {
			return err
		}
		// To the millisecond, as the service stamps expiries.
		if err := tx.Raw("SELECT date_trunc('milliseconds', clock_timestamp() + make_interval(secs => ?))", lead.Seconds()).Row().Scan(&expiry); err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO reservations (id, status, created_at, expires_at) "+
			"SELECT 'sweep-' || lpad(g::text, 8, '0'), 'held', date_trunc('milliseconds', now()), ? FROM generate_series(1, ?) g", expiry, n).Error; err != nil {
			return err
		}
		if err := tx.Exec("INSERT INTO reservation_lines (reservation_id, sku, quantity) SELECT id, ?, 1 FROM reservations", sku).Error; err != nil {
			return err
		}
		return tx.Exec("INSERT INTO stock_ledger (sku, delta, kind, reservation_id, fence, created_at) "+
			"SELECT ?, -1, 'hold', id, 0, created_at FROM reservations", sku).Error
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("insert holds: %w", err)
	}
	if err := db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return time.Time{}, fmt.Errorf("analyze: %w", err)
	}
	if expiry.IsZero() {
		return time.Time{}, errors.New("insert holds: no expiry read")
	}
	return expiry, nil
}

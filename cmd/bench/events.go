package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/jetstream"
	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The stock events benchmark (issue 32), on the default strategy: what
// writing an event per change and relaying it to NATS JetStream costs per
// order, against replicas that write none (--events=false), the two taking
// turns in ABBA order; the delivery lag from commit to JetStream's
// acknowledgement under that load; and how long the relay takes to catch up
// after NATS was down for a while with the load on.

// The two configurations, in the order of the even rounds.
const (
	eventsOff = "off"
	eventsOn  = "on"
)

var eventConfigs = []string{eventsOff, eventsOn}

// eventWorkloads are the workloads the events are measured on, of those
// -workloads names.
var eventWorkloads = []string{"hot", "zipf"}

// The catch-up run's timing.
const (
	catchUpBefore  = 5 * time.Second        // orders measured before NATS is stopped
	catchUpDown    = 10 * time.Second       // NATS down
	catchUpWait    = 120 * time.Second      // the longest wait for the backlog after NATS is back
	catchUpAfter   = 5 * time.Second        // orders measured after the catch-up
	catchUpPoll    = 250 * time.Millisecond // how often the backlog is read
	catchUpStep    = 500 * time.Millisecond // the orders' timeline's resolution
	catchUpDrain   = 30 * time.Second       // the longest wait for the last events, load stopped, before the stream is counted
	eventsTarget   = 1.10                   // events on ÷ off, CPU per order
	eventsWorkload = "hot"                  // the catch-up run's
)

type eventsBench struct {
	o    options
	bins topology.Binaries
	db   *gorm.DB
	rdb  *redis.Client
	log  *slog.Logger
	res  *EventsResults
}

// measureEvents runs the events' section: the ABBA pairs on each workload,
// then the catch-up run, each NATS a private nats-server of its own.
func measureEvents(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client,
	log *slog.Logger, m Machine) (*EventsResults, error) {
	b := &eventsBench{o: o, bins: bins, db: db, rdb: rdb, log: log, res: &EventsResults{onOff: newOnOff(o, m, o.eventsVUs)}}
	nats, err := startNATS(ctx)
	if err != nil {
		if o.requireReal {
			return nil, fmt.Errorf("events: %w", err)
		}
		log.Warn("events: not run", "why", err)
		b.res.NotRun = err.Error()
		return b.res, nil
	}
	defer nats.close()
	wls := sectionWorkloads(o.workloads, eventWorkloads)
	names := make([]string, len(wls))
	for i, w := range wls {
		names[i] = w.Name
	}
	log.Info("events: plan", "strategy", orders.DefaultStrategy, "vus", b.res.VUs, "workloads", names, "configurations", eventConfigs,
		"runs", len(names)*len(eventConfigs)*b.res.Repeats, "run_length", b.res.Duration, "nats", nats.URL,
		"catch_up", fmt.Sprintf("%s down, %s at most to catch up", catchUpDown, catchUpWait))
	if err := abbaRounds(wls, b.res.Repeats, eventConfigs, func(w Workload, cfg string, round int) error {
		r, err := b.contender(ctx, w, cfg, nats, round)
		if err == nil {
			b.res.Runs = append(b.res.Runs, r)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("events, %w", err)
	}
	nats.close() // the catch-up run has a server and a stream of its own, to count
	b.res.Points, b.res.Costs = eventPoints(b.res.Runs, workloads)
	if slices.ContainsFunc(o.workloads, func(w Workload) bool { return w.Name == eventsWorkload }) {
		if b.res.CatchUp, err = b.catchUp(ctx); err != nil {
			return nil, fmt.Errorf("events, catch-up: %w", err)
		}
	}
	b.res.LoadAfter = loadAverage()
	return b.res, nil
}

// configEnv is a configuration's replica environment: no events, or events
// relayed to the NATS at url. NATS_URL is set either way, so that one in the
// bench's own environment is not inherited.
func configEnv(cfg, url string) []string {
	if cfg == eventsOff {
		return []string{"STOCKGUARD_EVENTS=false", "NATS_URL="}
	}
	return []string{"STOCKGUARD_EVENTS=true", "NATS_URL=" + url}
}

// contender runs the workload once on fresh tables and new replicas of one
// configuration: a warm-up, ANALYZE, then the metered run, with the lag
// histogram read from every replica before and after it.
func (b *eventsBench) contender(ctx context.Context, w Workload, cfg string, nats *natsServer, round int) (EventsRun, error) {
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, nil, b.log, configEnv(cfg, nats.URL)...)
	if err != nil {
		return EventsRun{}, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	meter, err := warmUp(ctx, b.bins, c, b.rdb, b.db, w, b.res.VUs)
	if err != nil {
		return EventsRun{}, err
	}
	before, err := clusterEvents(ctx, c.urls)
	if err != nil {
		return EventsRun{}, err
	}
	if cfg == eventsOn {
		meter.locks = []int{nats.Pid()} // NATS's CPU, in the lock service's place: reported apart
	}
	r, err := meteredRun(ctx, meter, b.bins.Loadtest, c.lb.URL, b.rdb, b.db, w, b.res.VUs, b.res.Duration)
	if err != nil {
		return EventsRun{}, err
	}
	after, err := clusterEvents(ctx, c.urls)
	if err != nil {
		return EventsRun{}, err
	}
	r.Strategy, r.Round = string(orders.DefaultStrategy), round
	er := EventsRun{Config: cfg, Round: round + 1, Run: r, Published: int64(after.published - before.published)}
	if cfg == eventsOn {
		er.Lag = after.lag.sub(before.lag)
	}
	if err := b.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM stock_events").Row().Scan(&er.Events); err != nil {
		return EventsRun{}, fmt.Errorf("count events: %w", err)
	}
	b.log.Info("events: run", "workload", w.Name, "events", cfg, "round", round+1, "orders/s", int(r.OrdersPerSec),
		"p99_ms", r.P99, "cpu_us_per_order", int(1e6*r.CPUPerOrder()), "replica_cpu_us_per_order", int(1e6*r.CPU.Replicas/float64(max(r.Accepted, 1))),
		"lag_p50_ms", fmtMS(er.Lag.Quantile(0.5)), "lag_p99_ms", fmtMS(er.Lag.Quantile(0.99)), "published", er.Published,
		"oversold", r.Oversold, "consistent", r.Consistent)
	return er, nil
}

func fmtMS(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return fmt.Sprintf("%.1f", 1e3*s)
}

// backlogSQL is the relay's backlog as the database has it: the events after
// the stream's cursor (the query of the store's EventBacklog; an event's id is
// its position in the feed).
const backlogSQL = "SELECT COUNT(*) FROM stock_events WHERE id > " +
	"COALESCE((SELECT through FROM event_cursors WHERE name = '" + orders.DestinationNATS + "'), 0)"

// catchUp runs the hot SKU with events to a NATS of its own, stops that NATS
// for catchUpDown with the load on, starts it again on the same port and
// store, and measures the orders' rate through it all, the backlog's peak and
// how long the relay takes to catch up; then, the load stopped and the last
// events delivered, that the stream holds every event the outbox wrote.
func (b *eventsBench) catchUp(ctx context.Context) (*CatchUpResult, error) {
	nats, err := startNATS(ctx)
	if err != nil {
		return nil, err
	}
	defer nats.close()
	i := slices.IndexFunc(workloads, func(w Workload) bool { return w.Name == eventsWorkload })
	w := workloads[i]
	res := &CatchUpResult{Workload: w.Name, VUs: b.res.VUs, DownS: catchUpDown.Seconds(), WaitS: catchUpWait.Seconds(),
		PollS: catchUpPoll.Seconds(), Consistent: true}
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, nil, b.log, configEnv(eventsOn, nats.URL)...)
	if err != nil {
		return nil, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	d, err := newDriver(ctx, c.lb.URL, b.res.VUs, b.log)
	if err != nil {
		return nil, err
	}
	defer d.close()
	if err := d.seed(ctx, w); err != nil {
		return nil, err
	}
	drive(ctx, b.res.VUs, lockWarmup, d.orderOp(w), false)
	if err := b.db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	start := time.Now()
	loaded := make(chan OpRun, 1)
	go func() {
		loaded <- drive(loadCtx, b.res.VUs, catchUpBefore+catchUpDown+catchUpWait+catchUpAfter+10*time.Second, d.orderOp(w), true)
	}()

	// The backlog, read every catchUpPoll from the database and from the
	// replicas' gauges, until the sampling stops.
	var mu sync.Mutex
	var samples []BacklogSample
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(catchUpPoll)
		defer tick.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
			s := BacklogSample{T: time.Since(start).Seconds()}
			qctx, cancel := context.WithTimeout(sampleCtx, 2*time.Second)
			err := b.db.WithContext(qctx).Raw(backlogSQL).Row().Scan(&s.DB)
			cancel()
			if err != nil {
				if sampleCtx.Err() == nil {
					b.log.Warn("events: backlog not read", "err", err)
				}
				continue
			}
			if m, err := clusterEvents(sampleCtx, c.urls); err == nil {
				s.Gauge, s.OldestS = m.backlog, m.oldest
			}
			mu.Lock()
			samples = append(samples, s)
			mu.Unlock()
		}
	}()
	wait := func(dur time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(dur):
			return nil
		}
	}
	if err := wait(catchUpBefore); err != nil {
		return nil, err
	}
	stopped := time.Now()
	b.log.Info("events: stopping NATS (SIGTERM)", "down_for", catchUpDown)
	nats.Stop()
	if err := wait(catchUpDown - time.Since(stopped)); err != nil {
		return nil, err
	}
	if err := nats.Start(ctx); err != nil {
		return nil, fmt.Errorf("start NATS again: %w", err)
	}
	restarted := time.Now()
	res.DownActualS = restarted.Sub(stopped).Seconds()
	b.log.Info("events: NATS is back", "down_s", fmt.Sprintf("%.1f", res.DownActualS))

	// Caught up: the database's backlog back at its level before the stop
	// (its highest reading in the window before it: under load it is seldom
	// 0, the newest events wait for the relay's next round), read after the
	// restart.
	stopAt, restartAt := stopped.Sub(start).Seconds(), restarted.Sub(start).Seconds()
	steady := int64(-1)
	mu.Lock()
	for _, s := range samples {
		if s.T >= (catchUpBefore/2).Seconds() && s.T < stopAt {
			steady = max(steady, s.DB)
		}
	}
	mu.Unlock()
	if steady < 0 {
		return nil, errors.New("no backlog read in the window before NATS was stopped")
	}
	var caught time.Time
	deadline := time.Now().Add(catchUpWait)
	lastLog, seen := time.Now(), 0
	for caught.IsZero() && time.Now().Before(deadline) {
		if err := wait(catchUpPoll); err != nil {
			return nil, err
		}
		mu.Lock()
		fresh := slices.Clone(samples[seen:])
		seen = len(samples)
		mu.Unlock()
		for _, s := range fresh {
			if s.T > restartAt && s.DB <= steady {
				caught = start.Add(time.Duration(s.T * float64(time.Second)))
				break
			}
		}
		if len(fresh) > 0 && time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			b.log.Info("events: catching up", "backlog", fresh[len(fresh)-1].DB, "steady", steady,
				"since_restart", time.Since(restarted).Round(100*time.Millisecond))
		}
	}
	if !caught.IsZero() {
		if err := wait(catchUpAfter); err != nil {
			return nil, err
		}
	}
	stopLoad()
	run := <-loaded
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// The last events, the load stopped: the backlog must reach 0.
	drained := time.Now()
	for {
		var n int64
		if err := b.db.WithContext(ctx).Raw(backlogSQL).Row().Scan(&n); err != nil {
			return nil, fmt.Errorf("read backlog: %w", err)
		}
		if n == 0 {
			res.Drained = true
			break
		}
		if time.Since(drained) > catchUpDrain {
			b.log.Warn("events: the backlog did not reach 0 after the load", "backlog", n, "waited", catchUpDrain)
			break
		}
		if err := wait(catchUpPoll); err != nil {
			return nil, err
		}
	}
	stopSampling()
	<-sampled

	at := func(t time.Time) int64 { return int64(t.Sub(start)) }
	rate := func(from, to time.Time) float64 {
		if !to.After(from) {
			return 0
		}
		i := sort.Search(len(run.Done), func(i int) bool { return run.Done[i] >= at(from) })
		j := sort.Search(len(run.Done), func(i int) bool { return run.Done[i] >= at(to) })
		return float64(j-i) / to.Sub(from).Seconds()
	}
	from := start.Add(1500 * time.Millisecond) // the VUs' first requests open connections
	res.BeforeS = stopped.Sub(from).Seconds()
	res.Before, res.During = rate(from, stopped), rate(stopped, restarted)
	res.Steady = steady
	if !caught.IsZero() {
		res.CaughtUp = true
		res.CatchUpS = caught.Sub(restarted).Seconds()
		res.Catching = rate(restarted, caught)
		res.After = rate(caught, caught.Add(catchUpAfter))
	}
	res.Failed, res.FailedBy = run.Failed, run.FailedBy
	res.StopAtS, res.RestartAtS = stopAt, restartAt
	for _, s := range samples {
		res.PeakDB = max(res.PeakDB, s.DB)
		res.PeakGauge = max(res.PeakGauge, s.Gauge)
		res.PeakOldestS = max(res.PeakOldestS, s.OldestS)
	}
	res.Samples = samples
	res.TimelineStep = catchUpStep.Seconds()
	ended := start.Add(time.Duration(run.Seconds * float64(time.Second)))
	for t := start; !t.Add(catchUpStep).After(ended); t = t.Add(catchUpStep) {
		res.Timeline = append(res.Timeline, rate(t, t.Add(catchUpStep)))
	}

	// Every event in the stream: its count, not less than the outbox's.
	if err := b.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM stock_events").Row().Scan(&res.OutboxEvents); err != nil {
		return nil, fmt.Errorf("count events: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	n, err := jetstream.StreamMessages(sctx, nats.URL, jetstream.DefaultStream)
	cancel()
	if err != nil {
		return nil, err
	}
	res.StreamMessages = int64(n) //nolint:gosec // a count of messages, far below 2^63
	if res.Oversold, res.Consistent, err = d.audit(ctx); err != nil {
		return nil, err
	}
	b.log.Info("events: catch-up done", "orders/s_before", int(res.Before), "during_outage", int(res.During), "catching_up", int(res.Catching),
		"after", int(res.After), "backlog_peak", res.PeakDB, "gauge_peak", res.PeakGauge, "steady", res.Steady, "caught_up", res.CaughtUp,
		"catch_up_s", fmt.Sprintf("%.2f", res.CatchUpS), "outbox", res.OutboxEvents, "stream", res.StreamMessages,
		"failed", failures(res.Failed, res.FailedBy), "oversold", res.Oversold, "consistent", res.Consistent)
	return res, nil
}

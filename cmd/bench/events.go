package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
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
	t := catchUpTimes{start: time.Now()}
	loaded := make(chan OpRun, 1)
	go func() {
		loaded <- drive(loadCtx, b.res.VUs, catchUpBefore+catchUpDown+catchUpWait+catchUpAfter+10*time.Second, d.orderOp(w), true)
	}()
	backlog := b.sampleBacklog(ctx, t.start, c.urls)
	defer backlog.stop()

	if err := sleepCtx(ctx, catchUpBefore); err != nil {
		return nil, err
	}
	if t.stopped, t.restarted, err = b.outage(ctx, nats); err != nil {
		return nil, err
	}
	res.DownActualS = t.restarted.Sub(t.stopped).Seconds()
	b.log.Info("events: NATS is back", "down_s", fmt.Sprintf("%.1f", res.DownActualS))

	// Caught up: the database's backlog back at its level before the stop
	// (its highest reading in the window before it: under load it is seldom
	// 0, the newest events wait for the relay's next round), read after the
	// restart.
	before, _ := backlog.since(0)
	steady := steadyBacklog(before, (catchUpBefore / 2).Seconds(), t.stopped.Sub(t.start).Seconds())
	if steady < 0 {
		return nil, errors.New("no backlog read in the window before NATS was stopped")
	}
	if t.caught, err = b.awaitCatchUp(ctx, backlog, t, steady); err != nil {
		return nil, err
	}
	if !t.caught.IsZero() {
		if err := sleepCtx(ctx, catchUpAfter); err != nil {
			return nil, err
		}
	}
	stopLoad()
	run := <-loaded
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if res.Drained, err = b.drainBacklog(ctx); err != nil {
		return nil, err
	}
	res.record(run, backlog.finish(), steady, t)
	if err := b.checkDelivery(ctx, nats.URL, d, res); err != nil {
		return nil, err
	}
	b.log.Info("events: catch-up done", "orders/s_before", int(res.Before), "during_outage", int(res.During), "catching_up", int(res.Catching),
		"after", int(res.After), "backlog_peak", res.PeakDB, "gauge_peak", res.PeakGauge, "steady", res.Steady, "caught_up", res.CaughtUp,
		"catch_up_s", fmt.Sprintf("%.2f", res.CatchUpS), "outbox", res.OutboxEvents, "stream", res.StreamMessages,
		"failed", failures(res.Failed, res.FailedBy), "oversold", res.Oversold, "consistent", res.Consistent)
	return res, nil
}

// sleepCtx waits for dur, or until ctx ends.
func sleepCtx(ctx context.Context, dur time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(dur):
		return nil
	}
}

// catchUpTimes are the catch-up run's moments: the load's start, NATS's stop
// and restart, and when the relay caught up (zero when it did not).
type catchUpTimes struct {
	start, stopped, restarted, caught time.Time
}

// backlogSampler reads the relay's backlog every catchUpPoll, from the
// database and from the replicas' gauges, in a goroutine of its own: the
// catch-up run watches the readings while they come, to see the relay catch
// up.
type backlogSampler struct {
	mu      sync.Mutex
	samples []BacklogSample
	stop    context.CancelFunc
	done    chan struct{}
}

// sampleBacklog starts reading the backlog; a sample's T is in seconds from
// start.
func (b *eventsBench) sampleBacklog(ctx context.Context, start time.Time, urls []string) *backlogSampler {
	sampleCtx, stop := context.WithCancel(ctx)
	bs := &backlogSampler{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(bs.done)
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
			if m, err := clusterEvents(sampleCtx, urls); err == nil {
				s.Gauge, s.OldestS = m.backlog, m.oldest
			}
			bs.mu.Lock()
			bs.samples = append(bs.samples, s)
			bs.mu.Unlock()
		}
	}()
	return bs
}

// since is a copy of the samples from the n-th on, and how many there are.
func (bs *backlogSampler) since(n int) ([]BacklogSample, int) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return slices.Clone(bs.samples[n:]), len(bs.samples)
}

// finish stops the sampling and returns every sample.
func (bs *backlogSampler) finish() []BacklogSample {
	bs.stop()
	<-bs.done
	return bs.samples
}

// steadyBacklog is the database's highest backlog read in [from, to)
// seconds, or -1 when none was read then.
func steadyBacklog(samples []BacklogSample, from, to float64) int64 {
	steady := int64(-1)
	for _, s := range samples {
		if s.T >= from && s.T < to {
			steady = max(steady, s.DB)
		}
	}
	return steady
}

// outage stops NATS (SIGTERM) with the load on and starts it again on the
// same port and store catchUpDown after.
func (b *eventsBench) outage(ctx context.Context, nats *natsServer) (stopped, restarted time.Time, err error) {
	stopped = time.Now()
	b.log.Info("events: stopping NATS (SIGTERM)", "down_for", catchUpDown)
	nats.Stop()
	if err := sleepCtx(ctx, catchUpDown-time.Since(stopped)); err != nil {
		return stopped, time.Time{}, err
	}
	if err := nats.Start(ctx); err != nil {
		return stopped, time.Time{}, fmt.Errorf("start NATS again: %w", err)
	}
	return stopped, time.Now(), nil
}

// awaitCatchUp waits up to catchUpWait for a backlog read after the restart
// at or below steady, and returns when that reading was taken: zero when
// none came in time.
func (b *eventsBench) awaitCatchUp(ctx context.Context, backlog *backlogSampler, t catchUpTimes, steady int64) (time.Time, error) {
	restartAt := t.restarted.Sub(t.start).Seconds()
	var caught time.Time
	deadline := time.Now().Add(catchUpWait)
	lastLog, seen := time.Now(), 0
	for caught.IsZero() && time.Now().Before(deadline) {
		if err := sleepCtx(ctx, catchUpPoll); err != nil {
			return time.Time{}, err
		}
		var fresh []BacklogSample
		fresh, seen = backlog.since(seen)
		for _, s := range fresh {
			if s.T > restartAt && s.DB <= steady {
				caught = t.start.Add(time.Duration(s.T * float64(time.Second)))
				break
			}
		}
		if len(fresh) > 0 && time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			b.log.Info("events: catching up", "backlog", fresh[len(fresh)-1].DB, "steady", steady,
				"since_restart", time.Since(t.restarted).Round(100*time.Millisecond))
		}
	}
	return caught, nil
}

// drainBacklog waits, the load stopped, for the last events: true when the
// backlog reached 0 within catchUpDrain.
func (b *eventsBench) drainBacklog(ctx context.Context) (bool, error) {
	drained := time.Now()
	for {
		var n int64
		if err := b.db.WithContext(ctx).Raw(backlogSQL).Row().Scan(&n); err != nil {
			return false, fmt.Errorf("read backlog: %w", err)
		}
		if n == 0 {
			return true, nil
		}
		if time.Since(drained) > catchUpDrain {
			b.log.Warn("events: the backlog did not reach 0 after the load", "backlog", n, "waited", catchUpDrain)
			return false, nil
		}
		if err := sleepCtx(ctx, catchUpPoll); err != nil {
			return false, err
		}
	}
}

// record fills in what the run measured: the orders' rates before, during
// and after the outage from the load's completion times (run.Done, in ns
// from t.start), the timeline, and the backlog's peaks. Apart from the
// measuring so that the arithmetic can be tested on its own.
func (res *CatchUpResult) record(run OpRun, samples []BacklogSample, steady int64, t catchUpTimes) {
	rate := func(from, to time.Time) float64 { return run.rate(t.start, from, to) }
	from := t.start.Add(1500 * time.Millisecond) // the VUs' first requests open connections
	res.BeforeS = t.stopped.Sub(from).Seconds()
	res.Before, res.During = rate(from, t.stopped), rate(t.stopped, t.restarted)
	res.Steady = steady
	if !t.caught.IsZero() {
		res.CaughtUp = true
		res.CatchUpS = t.caught.Sub(t.restarted).Seconds()
		res.Catching = rate(t.restarted, t.caught)
		res.After = rate(t.caught, t.caught.Add(catchUpAfter))
	}
	res.Failed, res.FailedBy = run.Failed, run.FailedBy
	res.StopAtS, res.RestartAtS = t.stopped.Sub(t.start).Seconds(), t.restarted.Sub(t.start).Seconds()
	for _, s := range samples {
		res.PeakDB = max(res.PeakDB, s.DB)
		res.PeakGauge = max(res.PeakGauge, s.Gauge)
		res.PeakOldestS = max(res.PeakOldestS, s.OldestS)
	}
	res.Samples = samples
	res.TimelineStep = catchUpStep.Seconds()
	ended := t.start.Add(time.Duration(run.Seconds * float64(time.Second)))
	for x := t.start; !x.Add(catchUpStep).After(ended); x = x.Add(catchUpStep) {
		res.Timeline = append(res.Timeline, rate(x, x.Add(catchUpStep)))
	}
}

// checkDelivery counts the events in the outbox and the messages in the
// stream (every event in the stream: not fewer than the outbox's), and
// audits the stock.
func (b *eventsBench) checkDelivery(ctx context.Context, natsURL string, d *driver, res *CatchUpResult) error {
	if err := b.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM stock_events").Row().Scan(&res.OutboxEvents); err != nil {
		return fmt.Errorf("count events: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	n, err := jetstream.StreamMessages(sctx, natsURL, jetstream.DefaultStream)
	cancel()
	if err != nil {
		return err
	}
	res.StreamMessages = int64(n) //nolint:gosec // a count of messages, far below 2^63
	res.Oversold, res.Consistent, err = d.audit(ctx)
	return err
}

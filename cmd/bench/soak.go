package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The soak: the default strategy on one emptied database, driven by the load
// generator in chunks that alternate the hot SKU and zipf, until the orders
// table holds the soak's orders. The benchmark never runs ANALYZE here, and
// leaves autovacuum as the server has it: whatever a database that grows under
// load does to the order path, the steps show.

// soakWorkloads are the workloads the soak alternates, in this order.
var soakWorkloads = []string{"hot", "zipf"}

// The chunks' lengths: each is sized to half a step of orders at its
// workload's last rate, within these bounds; the first of each workload, at no
// known rate yet, runs soakProbe.
const (
	soakMinChunk = 2 * time.Second
	soakMaxChunk = 60 * time.Second
	soakProbe    = 5 * time.Second
)

// soakDeadline bounds the soak: a minute to start, then the orders at no less
// than soakFloorRate orders/s on average, whatever the load generator's own
// set-up and audit take. A soak that decays below it stops at the deadline,
// and its report says how far it got.
const soakFloorRate = 400

func soakDeadline(orders int64) time.Duration {
	return time.Minute + time.Duration(orders/soakFloorRate)*time.Second
}

// runSoak measures the soak alone (-soak only), writes soak.json, soak.png and
// the Soak section of the report in place, and prints the summary.
func runSoak(ctx context.Context, o options, log *slog.Logger, stdout io.Writer) error {
	s, err := measureSoak(ctx, o, log)
	if err != nil {
		return err
	}
	if err := s.writeOnly(o); err != nil {
		return err
	}
	s.printSummary(stdout)
	fmt.Fprintf(stdout, "\nwrote the Soak section of %s, %s/soak.json and %s/soak.png\n", o.markdown, o.out, o.out)
	return nil
}

// soakAfterReport follows the full report, which rewrites the whole file: the
// Soak section of the last soak.json goes back in first (-soak off keeps it),
// then with -soak on the soak is measured and its section replaced.
func soakAfterReport(ctx context.Context, o options, log *slog.Logger, stdout io.Writer) error {
	if err := keepSoakSection(o); err != nil {
		log.Warn("soak: the last soak.json not put back in the report", "err", err)
	}
	if o.soak != "on" {
		return nil
	}
	return runSoak(ctx, o, log, stdout)
}

// keepSoakSection puts the Soak section of the last soak.json, if there is
// one, back into the report that was just written whole.
func keepSoakSection(o options) error {
	last, err := readSoak(soakJSON(o.out))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return last.writeSection(o)
}

func measureSoak(ctx context.Context, o options, log *slog.Logger) (*SoakResults, error) {
	res, err := withBench(ctx, o, log, func(bins topology.Binaries, db *gorm.DB, rdb *redis.Client) (*SoakResults, error) {
		s, err := soak(ctx, o, bins, db, rdb, log)
		if err != nil || o.soakHolds == 0 {
			return s, err
		}
		// The checkout soak after the orders', on emptied tables of its own.
		if s.Checkout, err = checkoutSoak(ctx, o, bins, db, rdb, log, s.When); err != nil {
			return nil, err
		}
		return s, nil
	})
	if err != nil {
		return nil, interrupted(ctx, err)
	}
	return res, nil
}

// soak runs the chunks on one cluster until the orders are in, or the deadline.
func soak(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger) (*SoakResults, error) {
	m := machine(ctx, db, rdb)
	res := &SoakResults{Command: o.command, When: m.When, Commit: m.Commit, Strategy: string(orders.DefaultStrategy),
		Replicas: o.replicas, VUs: o.soakVUs, Orders: o.soakOrders, Step: o.soakStep, Cores: m.Cores,
		PostgreSQL: m.PostgreSQL, Fsync: m.Fsync, Autovacuum: autovacuumSettings(ctx, db)}
	budget := soakDeadline(o.soakOrders)
	deadline := time.Now().Add(budget)
	// The context outlives the deadline by a margin: no chunk starts that
	// would end past the deadline, and the context stops one that overruns.
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(2*time.Minute))
	defer cancel()

	wls := make(map[string]Workload, len(soakWorkloads))
	for _, w := range workloads {
		wls[w.Name] = w
	}
	c, err := startCluster(ctx, o, bins, db, orders.DefaultStrategy, nil, log)
	if err != nil {
		return nil, err
	}
	stop := func() {
		if c != nil {
			c.stop(ctx, o.redisURL, log)
			c = nil
		}
	}
	defer stop()
	log.Info("soak: plan", "strategy", orders.DefaultStrategy, "replicas", o.replicas, "vus", o.soakVUs, "orders", o.soakOrders,
		"step", o.soakStep, "workloads", soakWorkloads, "deadline", budget, "autovacuum", res.Autovacuum)

	before := tableStats(ctx, db, log)
	start := time.Now()
	rate := map[string]float64{} // each workload's last orders/s
	var count int64              // orders in the database: the chunks' accepted, checked against the table at the end
	for i := 0; count < o.soakOrders; i++ {
		w := wls[soakWorkloads[i%len(soakWorkloads)]]
		d := chunkLength(min(o.soakStep/2, o.soakOrders-count), rate[w.Name])
		// The load generator's set-up and audit come on top of the chunk: the
		// last chunk's, or a few seconds.
		overhead := 5 * time.Second
		if n := len(res.Chunks); n > 0 {
			overhead = max(overhead, time.Duration((res.Chunks[n-1].WallS-res.Chunks[n-1].Seconds)*float64(time.Second))*2)
		}
		if time.Until(deadline) < d+overhead {
			res.TimedOut = true
			log.Warn("soak: stopped at the deadline", "orders", count, "of", o.soakOrders, "deadline", budget)
			break
		}
		t0 := time.Now()
		r, err := loadRun(ctx, bins.Loadtest, c.lb.URL, rdb, db, w, o.soakVUs, d)
		if err != nil {
			return nil, fmt.Errorf("soak, chunk %d (%s): %w", i+1, w.Name, err)
		}
		ch := soakChunk(w, count, r, time.Since(t0))
		res.Chunks = append(res.Chunks, ch)
		count = ch.To
		rate[w.Name] = r.OrdersPerSec
		elapsed := time.Since(start)
		eta := time.Duration(float64(elapsed) / float64(max(count, 1)) * float64(max(o.soakOrders-count, 0)))
		log.Info("soak: chunk", "n", i+1, "workload", w.Name, "orders", count, "of", o.soakOrders, "orders/s", int(r.OrdersPerSec),
			"p99_ms", r.P99, "chunk_s", fmt.Sprintf("%.1f", r.Seconds), "setup_audit_s", fmt.Sprintf("%.1f", ch.WallS-ch.Seconds),
			"elapsed", elapsed.Round(time.Second), "eta", eta.Round(time.Second), "load", ch.Load, "consistent", ch.Consistent, "oversold", r.Oversold)
		if r.Accepted == 0 {
			return nil, fmt.Errorf("soak, chunk %d (%s): no order accepted in %s", i+1, w.Name, d)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.Tables = tableGrowth(before, tableStats(ctx, db, log)) // before the count below, a sequential scan of its own
	if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM orders").Scan(&res.Counted).Error; err != nil {
		return nil, fmt.Errorf("count orders: %w", err)
	}
	// The control: the same chunks on emptied tables and new replicas, right
	// after the last step, so that the machine's load at the end weighs on both:
	// the last step against it is history's share of any decay, the rest is
	// the machine's.
	stop()
	if !res.TimedOut {
		if c, err = startCluster(ctx, o, bins, db, orders.DefaultStrategy, nil, log); err != nil {
			return nil, fmt.Errorf("soak, fresh tables: %w", err)
		}
		for _, name := range soakWorkloads {
			w := wls[name]
			t0 := time.Now()
			r, err := loadRun(ctx, bins.Loadtest, c.lb.URL, rdb, db, w, o.soakVUs, chunkLength(o.soakStep/2, rate[name]))
			if err != nil {
				return nil, fmt.Errorf("soak, fresh tables (%s): %w", name, err)
			}
			ch := soakChunk(w, 0, r, time.Since(t0))
			res.Fresh = append(res.Fresh, ch)
			log.Info("soak: fresh tables", "workload", name, "orders/s", int(r.OrdersPerSec), "p99_ms", r.P99, "load", ch.Load,
				"consistent", ch.Consistent, "oversold", r.Oversold)
		}
	}
	res.Steps = soakSteps(res.Chunks, res.Step, res.Orders, soakWorkloads)
	res.judge()
	log.Info("soak: done", "orders", count, "counted", res.Counted, "steps", len(res.Steps), "elapsed", time.Since(start).Round(time.Second),
		"timed_out", res.TimedOut)
	return res, nil
}

// soakChunk is a load generator run of the soak, from orders in the database.
func soakChunk(w Workload, from int64, r Run, wall time.Duration) SoakChunk {
	return SoakChunk{Workload: w.Name, From: from, To: from + r.Accepted, Accepted: r.Accepted, Seconds: r.Seconds,
		WallS: wall.Seconds(), OrdersPerSec: r.OrdersPerSec, P99: r.P99, FailedRatio: r.FailedRatio,
		Oversold: r.Oversold, Consistent: r.Consistent && r.Mismatches == 0, Unsettled: r.Unsettled, Load: loadAverage()}
}

// chunkLength is how long a chunk runs to place about n orders at rate
// orders/s (0: not known yet), within the soak's bounds, to 100 ms.
func chunkLength(n int64, rate float64) time.Duration {
	if rate <= 0 {
		return soakProbe
	}
	d := time.Duration(float64(n) / rate * float64(time.Second))
	return min(max(d, soakMinChunk), soakMaxChunk).Round(100 * time.Millisecond)
}

// autovacuumSettings reads the server's autovacuum settings, as the report
// states them: the soak runs under whatever they are.
func autovacuumSettings(ctx context.Context, db *gorm.DB) string {
	var rows []struct{ Name, Setting, Unit string }
	err := db.WithContext(ctx).Raw(`SELECT name, setting, COALESCE(unit, '') AS unit FROM pg_settings
WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_analyze_scale_factor', 'autovacuum_analyze_threshold',
  'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_insert_scale_factor') ORDER BY name`).Scan(&rows).Error
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	s := ""
	for i, r := range rows {
		if i > 0 {
			s += ", "
		}
		s += r.Name + " " + r.Setting + r.Unit
	}
	return s
}

// soakTables are the tables the order path grows.
var soakTables = []string{"orders", "order_lines", "stock_ledger", "idempotency_records", "skus", "stock_events"}

// tableStats reads how big the order path's tables are, and PostgreSQL's
// counters of their sequential scans and of autovacuum's visits. The counters
// are as the sessions last reported them (a backend reports within a second or
// so of going idle): tableGrowth takes the differences.
func tableStats(ctx context.Context, db *gorm.DB, log *slog.Logger) []SoakTable {
	var rows []SoakTable
	err := db.WithContext(ctx).Raw(`SELECT relname AS name, n_live_tup AS rows, pg_total_relation_size(relid) AS bytes,
  autovacuum_count AS autovacuums, autoanalyze_count AS autoanalyzes, analyze_count + vacuum_count AS manual, seq_scan AS seq_scans
FROM pg_stat_user_tables WHERE schemaname = current_schema() AND relname IN ?
ORDER BY relname`, soakTables).Scan(&rows).Error
	if err != nil {
		log.Warn("soak: table statistics not read", "err", err)
	}
	return rows
}

// tableGrowth is after with its counters made the differences from before.
func tableGrowth(before, after []SoakTable) []SoakTable {
	out := make([]SoakTable, 0, len(after))
	for _, a := range after {
		for _, b := range before {
			if b.Name == a.Name {
				a.Autovacuums -= b.Autovacuums
				a.Autoanalyzes -= b.Autoanalyzes
				a.Manual -= b.Manual
				a.SeqScans -= b.SeqScans
			}
		}
		out = append(out, a)
	}
	return out
}

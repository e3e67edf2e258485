package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// markdown writes BENCHMARKS.md: how to rerun, the machine, the targets, the
// tables, the charts and what the figures mean.
func (r *Results) markdown(w io.Writer, o options) {
	m := r.Machine
	fmt.Fprintf(w, `# Benchmarks

Written by `+"`make bench`"+` (`+"`go run ./cmd/bench -profile %s`"+`) on %s, commit %s. Rerun it to
replace this file, `+"`benchmarks/results.json`"+` (every run) and the charts.

**Setup.** %d replica processes of `+"`stockguard serve`"+` behind a round-robin balancer, on
the machine's Redis and PostgreSQL, with the load generator as the client (closed model:
each VU sends its next order when the last is answered; quantity 1, an Idempotency-Key on
every order, no retries or cancels). Each figure is the median of %d runs of %s; the
service runs with its defaults (lock TTL 5s, lock wait 2s). Every run ends with the load
generator's audit. Stock is ample in the throughput runs; a sell-out run per strategy
(%d units, %d VUs) checks overselling.

**Machine.** %s, %d cores, %s memory; %s; PostgreSQL %s (fsync %s, synchronous_commit %s);
Redis %s. Everything (replicas, balancer, generator, Redis, PostgreSQL) shares the cores.

`, r.Profile.Name, m.When, m.Commit, r.Replicas, r.Profile.Repeats, r.Profile.Duration, sellout.Stock, slices.Max(r.Profile.VUs),
		m.CPU, m.Cores, m.Memory, m.Go, m.PostgreSQL, m.Fsync, m.SyncCommit, m.Redis)

	fmt.Fprintf(w, "## Targets\n\n| target | figure | |\n|---|---|---|\n")
	for _, t := range r.Targets {
		mark := "pass"
		if !t.Pass {
			mark = "**miss**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.What, t.Figure, mark)
	}

	fmt.Fprintf(w, "\n## Accepted orders per second, and p99\n\n")
	fmt.Fprintf(w, "pgbench, the guarded single-row `UPDATE` alone with 8 clients, one per commit: **%.0f tps** (median of %s).\n\n",
		median(r.PgBench), fmtList(r.PgBench))
	r.table(w)
	fmt.Fprintf(w, "\n![accepted orders/s against VUs per strategy](%s/throughput.png)\n\n![latency percentiles per strategy](%s/latency.png)\n", o.out, o.out)

	fmt.Fprintf(w, "\n## Cost per accepted order, safety and memory\n\n")
	fmt.Fprintf(w, "| strategy | Redis commands | DB write transactions | sell-out: sold / oversold | peak RSS per replica |\n|---|---:|---:|---:|---:|\n")
	for _, c := range r.Costs {
		s := r.Sellout[c.Strategy]
		fmt.Fprintf(w, "| %s | %.2f | %.3f | %d / %d | %.1f MiB |\n", c.Strategy, c.RedisPerOrder, c.DBWritesPerOrder,
			s.Accepted, s.Oversold, float64(r.RSS[c.Strategy])/(1<<20))
	}
	fmt.Fprint(w, `
Redis commands are the server's `+"`total_commands_processed`"+` over a run, and database write
transactions the transaction ids PostgreSQL assigned, both divided by the orders accepted;
both include the run's seeding and audit.

`)
	if r.Holds != nil {
		r.Holds.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	if r.Locks != nil {
		r.Locks.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, `## The strategies

| strategy | what it does per order |
|---|---|
| `+"`lock-batch`"+` (default) | per-SKU lock through pkg/lock; the orders for one SKU set that queue on a replica are decided one by one against the stock and committed in one transaction (one guarded decrement by the total, each order with its own lines, ledger entries, idempotency record and answer) |
| `+"`lock`"+` | per-SKU lock through pkg/lock (local queue, wake-on-release, watchdog, fencing): cache check, guarded fenced decrement with the idempotency record in its transaction, cache update |
| `+"`lock-polling`"+` | the same on plain bsm/redislock, polling every 10 ms, no watchdog, no fencing: the common practice |
| `+"`db-atomic`"+` | no lock: the guarded decrement and the idempotency record in one transaction per order |
| `+"`redis-atomic`"+` | a Lua check-and-decrement of a counter in Redis, then db-atomic's transaction |
| `+"`unsafe`"+` | read, then write back an absolute value, no lock: the control group |

## Reading the figures

- On one hot SKU every safe strategy but lock-batch commits one order per transaction
  on one row, so it cannot pass the database's own ceiling (pgbench's line); lock-batch
  commits a replica's whole queue at once, so its throughput grows with the queue.
- db-atomic and redis-atomic serialize on the row lock inside PostgreSQL; lock and
  lock-polling serialize on the Redis lock and pay one commit per order
  inside it. lock-polling also pays for the time between a release and the next poll.
- On 100 SKUs the contention is spread, and the per-order commit dominates. On
  multi-SKU orders few orders share a SKU set, so lock-batch's batches are small and
  it pays for its locks without much to share them with: there db-atomic is ahead.
- Peak RSS is each replica's VmHWM. About 41 MiB of it is the binary's own code and
  data mapped in (RssFile of a replica at rest: the one binary carries three database
  drivers, SQLite in C, an embedded Redis, gin and Prometheus); the rest is the Go heap
  and stacks under load.
`)
	fmt.Fprintf(w, "\nProfile %q: %d VU counts %s, %d workloads, %d strategies.\n", r.Profile.Name, len(r.Profile.VUs),
		strings.Trim(fmt.Sprint(r.Profile.VUs), "[]"), len(o.workloads), len(r.strategies()))
}

func fmtList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

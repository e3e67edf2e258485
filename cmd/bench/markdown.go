package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// markdown writes BENCHMARKS.md: how to rerun, the machine, the targets, the
// tables, the charts and what the figures mean.
func (r *Results) markdown(w io.Writer, o options, in issueInputs) {
	m := r.Machine
	fmt.Fprintf(w, `# Benchmarks

Written by `+"`make bench`"+` (`+"`go run ./cmd/bench -profile %s`"+`) on %s, commit %s. Rerun it to
replace this file, `+"`benchmarks/results.json`"+` (every run) and the charts.

`, r.Profile.Name, m.When, m.Commit)
	in.r = r
	issueMarkdown(w, in)
	r.setupMarkdown(w)
	r.targetsMarkdown(w)
	r.throughputMarkdown(w, o.out)
	r.costMarkdown(w, o.out)
	r.safetyMarkdown(w)
	if r.Holds != nil {
		r.Holds.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	if r.Locks != nil {
		r.Locks.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	if r.Events != nil {
		r.Events.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	if r.Auth != nil {
		r.Auth.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	if r.Locations != nil {
		r.Locations.markdown(w, o.out)
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, `## The strategies

| strategy | what it does per order |
|---|---|
| `+"`lock-batch`"+` (default) | per-SKU locks through pkg/lock; the orders that queue on a replica, whatever their SKUs, are served together: the leader locks the union of their SKUs (in order, all or none), decides each order in arrival order against the stock and commits them all in one transaction (one guarded, fenced decrement per SKU by its total, each order with its own lines, ledger entries, idempotency record and answer) |
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
- On 100 SKUs the contention is spread, and the per-order commit dominates the strategies
  that commit each order alone. lock-batch batches a replica's whole queue across SKU sets,
  so its batches are as large there as on one SKU; what it pays instead is the union's
  locks (a batch at 256 VUs locks dozens of SKUs) and one guarded UPDATE per SKU in the
  batch's transaction.
- Peak RSS is each replica's VmHWM, the peak of its whole life. The kernel keeps no peak
  of its parts, so `+"`RssAnon`"+` and `+"`RssFile`"+` are sampled from `+"`/proc/<pid>/status`"+`
  every 100 ms over each run's load phase: the table gives the highest RssAnon a replica
  reached, with its RssFile at that moment. RssFile is mostly the binary's own pages:
  the kernel keeps the file in the page cache as large folios and maps each whole on the
  first touch, so the whole binary counts, at rest already (one copy for all the
  replicas of a machine). The one binary carries three database drivers, SQLite in C, an
  embedded Redis, etcd's gRPC client, the Azure SDK, gin and Prometheus. RssAnon is the
  Go runtime's: the live heap, goroutine stacks and GC metadata, with the heap let to
  grow to twice what is live.
`)
	fmt.Fprintf(w, "\nProfile %q: %d VU counts %s, %d workloads, %d strategies.\n", r.Profile.Name, len(r.Profile.VUs),
		strings.Trim(fmt.Sprint(r.Profile.VUs), "[]"), len(o.workloads), len(r.strategies()))
}

// The report's sections on the strategies, in its order: each its own
// function so that markdown reads as the report's outline.

// setupMarkdown writes how the strategies were measured, and on what.
func (r *Results) setupMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, `
## Setup

%d replica processes of `+"`stockguard serve`"+` behind a round-robin balancer, on
the machine's Redis and PostgreSQL, with the load generator as the client (closed model:
each VU sends its next order when the last is answered; quantity 1, an Idempotency-Key on
every order, no retries or cancels). The strategies are measured in %d rounds, in turn,
in ABBA order (forward, then backward), each turn on emptied tables and new replicas; each
figure is the median of its rounds' runs of %s, ± half their range as a share of it. The
service runs with its defaults (lock TTL 5s, lock wait 2s). Every run ends with the load
generator's audit. Stock is ample in the throughput runs; a sell-out run per strategy
(%d units, %d VUs) checks overselling. The **ceiling** is the same generator, balancer and
replicas at the same VUs on `+"`GET "+ceilingPath+"`"+`, an endpoint with nothing to do: what
the HTTP path allows on this machine.

**Machine.** %s, %d cores, %s memory; %s; PostgreSQL %s (fsync %s, synchronous_commit %s);
Redis %s. Everything (replicas, balancer, generator, Redis, PostgreSQL) shares the cores.

`, r.Replicas, r.Profile.Repeats, r.Profile.Duration, sellout.Stock, slices.Max(r.Profile.VUs),
		m.CPU, m.Cores, m.Memory, m.Go, m.PostgreSQL, m.Fsync, m.SyncCommit, m.Redis)
}

// targetsMarkdown writes the strategies' targets (issue 17), judged.
func (r *Results) targetsMarkdown(w io.Writer) {
	fmt.Fprintf(w, "## The strategies' targets (issue 17)\n\n| target | figure | |\n|---|---|---|\n")
	for _, t := range r.Targets {
		mark := "pass"
		if !t.Pass {
			mark = "**miss**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.What, t.Figure, mark)
	}
}

// throughputMarkdown writes the orders/s and p99 table with pgbench's
// ceiling and the charts.
func (r *Results) throughputMarkdown(w io.Writer, out string) {
	fmt.Fprintf(w, "\n## Accepted orders per second, and p99\n\n")
	fmt.Fprintf(w, "pgbench, the guarded single-row `UPDATE` alone with 8 clients, one per commit: **%.0f tps** (median of %s).\n\n",
		median(r.PgBench), fmtList(r.PgBench))
	r.table(w)
	fmt.Fprintf(w, "\n![accepted orders/s against VUs per strategy](%s/throughput.png)\n\n![latency percentiles per strategy](%s/latency.png)\n", out, out)
}

// costMarkdown writes the CPU, Redis and database cost per accepted order.
func (r *Results) costMarkdown(w io.Writer, out string) {
	fmt.Fprintf(w, "\n## Cost per accepted order\n\n")
	fmt.Fprintf(w, "| strategy | workload | CPU µs: replicas + Redis + PostgreSQL = total | Redis commands | Redis round trips | DB write transactions |\n|---|---|---:|---:|---:|---:|\n")
	for _, c := range r.Costs {
		fmt.Fprintf(w, "| %s | %s | %.0f + %.0f + %.0f = **%.0f** | %.2f | %s | %.3f |\n", c.Strategy, c.Workload,
			1e6*c.CPU.Replicas, 1e6*c.CPU.Redis, 1e6*c.CPU.Postgres, 1e6*c.CPU.Total(), c.RedisPerOrder, fmtTrips(c.TripsPerOrder), c.DBWritesPerOrder)
	}
	fmt.Fprintf(w, `
CPU is user and system time from `+"`/proc/<pid>/stat`"+` of the replicas, the Redis server and
every PostgreSQL process (with the postmaster's reaped backends, and its background
writers: the WAL an order writes is part of its cost), sampled every 100 ms and read off
at the start and end of each run's load phase; Redis commands are the server's
`+"`total_commands_processed`"+` (with every command a Lua script runs inside Redis),
Redis round trips the replicas' own count of their calls to Redis
(`+"`stockguard_redis_round_trips_total`"+`, read from each replica's `+"`/metrics`"+`:
a command, a script or a pipeline is one), and database write transactions the
transaction ids PostgreSQL assigned, over the whole run (its seeding and audit included). All three are
summed over every VU count and round of the workload and divided by the orders accepted.
The balancer and the generator are not counted: they are the client's side.
%s
![CPU per accepted order](%s/cpu.png)
`, r.profileNote(out), out)
}

// safetyMarkdown writes the sell-outs and the replicas' memory.
func (r *Results) safetyMarkdown(w io.Writer) {
	fmt.Fprint(w, `
## Safety and memory

| strategy | sell-out: sold / oversold | peak RSS per replica | peak RssAnon per replica (its RssFile then) |
|---|---:|---:|---:|
`)
	for _, s := range r.strategies() {
		sell := r.Sellout[s]
		fmt.Fprintf(w, "| %s | %d / %d | %.1f MiB | %s |\n", s, sell.Accepted, sell.Oversold, float64(r.RSS[s])/(1<<20), fmtMemory(r.Memory[s]))
	}
	fmt.Fprintln(w)
}

// profileNote links the CPU profile and its top 20 when the run took one.
func (r *Results) profileNote(out string) string {
	p := r.CPUProfile
	if p == nil {
		return ""
	}
	file := out + "/" + p.File
	return fmt.Sprintf(`
The CPU profile of one replica of %s on the %s workload at %d VUs, over %d s of a run of its
own (%.0f orders/s, %.0f µs of CPU per order in that run): [%s](%s), its top 20 by flat
time in [%s](%s). Open it with `+"`go tool pprof -http=: %s`"+`.
`, p.Strategy, p.Workload, p.VUs, p.Seconds, p.OrdersPerSec, 1e6*p.CPUPerOrder, file, file, out+"/"+p.Top, out+"/"+p.Top, file)
}

func fmtList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// fmtTrips is round trips per order, or a dash when not measured.
func fmtTrips(x float64) string {
	if x == 0 {
		return notMeasured
	}
	return fmt.Sprintf("%.2f", x)
}

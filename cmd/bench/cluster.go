package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// benchTables are every table a run writes. Holds' tables and the sweeper's
// leader fence are among them: a fresh Redis namespace restarts the lease's
// tokens at 1, and a leader fence left by an earlier run would make the
// database refuse the new sweeper's writes. The events' cursors go with the
// events: feed positions start again at 1 on an emptied stock_events, and a
// cursor left at an earlier run's position would count the new events as
// delivered. The caps' counters (I9) go with the holds and orders they
// count: left from an earlier run, the audit finds them miscounted.
const benchTables = "skus, orders, order_lines, stock_ledger, idempotency_records, reservations, reservation_lines, leader_fences, stock_events, event_cursors, " +
	"client_sku_holds, customer_sku_units, sku_locations, allocations"

// cluster is replicas of one strategy behind a balancer, on emptied tables and
// a Redis namespace of their own.
type cluster struct {
	procs []*exec.Cmd
	urls  []string // the replicas' own, behind the balancer
	lb    *topology.Balancer
	ns    string
}

// startCluster empties the tables, runs prepare on them (nil: nothing) before
// any replica could cache what they hold, then starts the replicas on s, with
// extraEnv (NAME=value) added to their environment.
func startCluster(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, s orders.Strategy,
	prepare func() error, log *slog.Logger, extraEnv ...string) (*cluster, error) {
	return startClusterFirst(ctx, o, bins, db, s, prepare, log, nil, extraEnv...)
}

// startClusterFirst is startCluster with firstEnv added to the first replica's
// environment alone (a pprof listener needs an address of its own).
func startClusterFirst(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, s orders.Strategy,
	prepare func() error, log *slog.Logger, firstEnv []string, extraEnv ...string) (*cluster, error) {
	// Each run starts on empty tables, so that none pays for another's rows.
	if err := db.WithContext(ctx).Exec("TRUNCATE " + benchTables).Error; err != nil {
		return nil, fmt.Errorf("truncate: %w", err)
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			return nil, err
		}
	}
	c := &cluster{ns: "bench-" + string(s) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	env := replicaEnv(o, s, c.ns, extraEnv...)
	var backends []string
	for i := range o.replicas {
		e := env
		if i == 0 {
			e = append(slices.Clone(env), firstEnv...)
		}
		cmd, u, err := topology.StartReplica(ctx, bins.Stockguard, e)
		if err != nil {
			c.stop(ctx, o.redisURL, log)
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		c.procs = append(c.procs, cmd)
		backends = append(backends, u)
	}
	c.urls = backends
	lb, err := topology.StartBalancer(ctx, backends, log)
	if err != nil {
		c.stop(ctx, o.redisURL, log)
		return nil, err
	}
	c.lb = lb
	return c, nil
}

// replicaEnv is a replica's environment: this process's, the bench's settings,
// then extraEnv.
func replicaEnv(o options, s orders.Strategy, ns string, extraEnv ...string) []string {
	env := append(os.Environ(), "DATABASE_URL="+o.databaseURL, "REDIS_URL="+o.redisURL, "STOCKGUARD_NAMESPACE="+ns,
		"STOCKGUARD_ADMIN_TOKEN="+adminToken, "STOCKGUARD_STRATEGY="+string(s), "STOCKGUARD_ALLOW_OVERSELL=true",
		"STOCKGUARD_ADDR=127.0.0.1:0", "STOCKGUARD_LOG_LEVEL=error")
	return append(env, extraEnv...)
}

// stop stops the balancer and the replicas, then deletes the namespace's keys.
func (c *cluster) stop(ctx context.Context, redisURL string, log *slog.Logger) {
	if c.lb != nil {
		c.lb.Stop(ctx)
	}
	topology.StopAll(c.procs)
	topology.DropNamespace(ctx, redisURL, c.ns, log)
}

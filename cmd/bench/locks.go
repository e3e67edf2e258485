package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The lock services benchmark, on the default strategy: orders/s and p99 on
// the hot SKU and on zipf with the SKU locks (and the sweeper's lease) on each
// lock service --lock-url offers, the contenders taking turns so that each
// sees the machine as the others do.

// lockServices are the lock services measured, in the order they take turns;
// the first is the one the others are compared with.
var lockServices = []string{"redis", "redlock", "postgres", "etcd", "zk", "azblob"}

// lockWarmup is each contender's warm-up before ANALYZE and the measured run.
const lockWarmup = time.Second

// lockTable is pglock's default table, emptied with the store's before each
// contender when it exists. Its rows are fresh anyway (each cluster has a
// namespace of its own): emptying it keeps the table as small for every run.
const lockTable = "stockguard_locks"

type locksBench struct {
	o    options
	bins topology.Binaries
	db   *gorm.DB
	rdb  *redis.Client
	log  *slog.Logger
	res  *LocksResults
	// The three private redis-servers of Redlock, when started.
	redlock []*redis.Client
	// pids are each lock service's own processes, for their CPU time.
	pids map[string][]int
}

// measureLocks runs the default strategy on each lock service, interleaved.
func measureLocks(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client,
	log *slog.Logger, m Machine) (*LocksResults, error) {
	b := &locksBench{o: o, bins: bins, db: db, rdb: rdb, log: log, res: &LocksResults{Command: o.command, When: m.When,
		Commit: m.Commit, Strategy: string(orders.DefaultStrategy), Replicas: o.replicas, VUs: o.locksVUs,
		Repeats: o.profile.LocksRepeats, Duration: o.profile.LocksDuration, Warmup: lockWarmup, Cores: m.Cores,
		LoadBefore: loadAverage()}, pids: map[string][]int{}}
	var names []string
	for _, w := range o.workloads {
		if slices.Contains(lockWorkloads, w.Name) {
			names = append(names, w.Name)
		}
	}
	envs := map[string][]string{} // each lock service's replica environment
	for _, name := range lockServices {
		s := LockService{Name: name, Where: lockWhere[name]}
		var env []string
		var stop func()
		switch name {
		case "redis":
			env = []string{"STOCKGUARD_LOCK_URL="} // the cache's Redis, as an empty --lock-url is
		case "postgres":
			env = []string{"STOCKGUARD_LOCK_URL=" + o.databaseURL}
		default: // private servers of its own: redlock, etcd, zk, azblob
			e, stopServers, why, err := b.startLockServers(ctx, name, o.requireReal)
			if err != nil {
				return nil, err
			}
			s.NotRun, env, stop = why, e, stopServers
		}
		if stop != nil {
			stop = sync.OnceFunc(stop)
			defer stop()
		}
		if s.NotRun == "" {
			ns := "bench-probe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			s.NotRun = probeLockService(ctx, bins.Stockguard, replicaEnv(o, orders.DefaultStrategy, ns, env...), lockURLOf(env))
			topology.DropNamespace(ctx, o.redisURL, ns, log)
		}
		if s.NotRun != "" {
			log.Warn("locks: not run", "lock_service", name, "why", s.NotRun)
			if stop != nil {
				stop()
			}
		}
		envs[name] = env
		b.res.Services = append(b.res.Services, s)
	}
	run := b.res.run()
	log.Info("locks: plan", "strategy", orders.DefaultStrategy, "vus", b.res.VUs, "workloads", names, "lock_services", run,
		"runs", len(names)*len(run)*b.res.Repeats, "run_length", b.res.Duration)
	for _, w := range o.workloads {
		if !slices.Contains(lockWorkloads, w.Name) {
			continue
		}
		for round := range b.res.Repeats {
			for _, name := range run {
				r, err := b.contender(ctx, w, name, envs[name], round)
				if err != nil {
					return nil, fmt.Errorf("locks, %s, %s: %w", w.Name, name, err)
				}
				b.res.Runs = append(b.res.Runs, r)
			}
		}
	}
	b.res.LoadAfter = loadAverage()
	b.res.Points = lockPoints(b.res.Runs, run, workloads)
	return b.res, nil
}

// lockWorkloads are the workloads the lock services are measured on, of those
// -workloads names.
var lockWorkloads = []string{"hot", "zipf"}

// lockWhere says where each lock service's locks are, for the report.
var lockWhere = map[string]string{
	"redis":    "the cache's Redis (an empty --lock-url)",
	"redlock":  "three private redis-servers started by the bench (no persistence), a majority of them",
	"postgres": "a row per SKU in the table " + lockTable + " of the bench's own PostgreSQL database, beside the store's tables",
	"etcd":     "a private single-member etcd started by the bench (its data fsynced on this machine's disk), keys under each cluster's namespace",
	"zk":       "a private standalone ZooKeeper started by the bench (its log fsynced on this machine's disk), nodes under each cluster's namespace",
	"azblob":   "a private Azurite (the Azure Storage emulator) started by the bench, one container, a blob lease per SKU under each cluster's namespace",
}

// contender runs the workload once on fresh tables and new replicas whose
// locks are on the lock service env names: a warm-up, ANALYZE, then the run.
func (b *locksBench) contender(ctx context.Context, w Workload, name string, env []string, round int) (LockRun, error) {
	c, err := startCluster(ctx, b.o, b.bins, b.db, orders.DefaultStrategy, func() error { return b.freshLocks(ctx) },
		b.log, env...)
	if err != nil {
		return LockRun{}, err
	}
	defer c.stop(ctx, b.o.redisURL, b.log)
	if _, err := loadRun(ctx, b.bins.Loadtest, c.lb.URL, b.rdb, b.db, w, b.res.VUs, lockWarmup); err != nil {
		return LockRun{}, fmt.Errorf("warm-up: %w", err)
	}
	if err := b.db.WithContext(ctx).Exec("ANALYZE").Error; err != nil {
		return LockRun{}, fmt.Errorf("analyze: %w", err)
	}
	before, err := b.lockCommands(ctx, name)
	if err != nil {
		return LockRun{}, err
	}
	pids := make([]int, len(c.procs))
	for i, p := range c.procs {
		pids[i] = p.Process.Pid
	}
	meter := newCPUMeter(ctx, b.rdb, pids)
	meter.locks = b.pids[name]
	r, err := meteredRun(ctx, meter, b.bins.Loadtest, c.lb.URL, b.rdb, b.db, w, b.res.VUs, b.res.Duration)
	if err != nil {
		return LockRun{}, err
	}
	after, err := b.lockCommands(ctx, name)
	if err != nil {
		return LockRun{}, err
	}
	r.Strategy = string(orders.DefaultStrategy)
	lr := LockRun{Service: name, Round: round + 1, Run: r, LockCmds: after - before}
	for _, p := range c.procs {
		lr.PeakRSS = max(lr.PeakRSS, vmHWM(p.Process.Pid))
	}
	b.log.Info("locks: run", "workload", w.Name, "lock_service", name, "round", round+1, "orders/s", int(r.OrdersPerSec),
		"p99_ms", r.P99, "cpu_us_per_order", int(1e6*r.CPUPerOrder()), "failed", r.FailedRatio, "oversold", r.Oversold, "consistent", r.Consistent)
	return lr, nil
}

// freshLocks empties pglock's table, when there is one, and the Redlock
// servers, so that every contender starts on the same empty lock service.
func (b *locksBench) freshLocks(ctx context.Context) error {
	var exists bool
	if err := b.db.WithContext(ctx).Raw("SELECT to_regclass(?) IS NOT NULL", lockTable).Row().Scan(&exists); err != nil {
		return fmt.Errorf("look for %s: %w", lockTable, err)
	}
	if exists {
		if err := b.db.WithContext(ctx).Exec("TRUNCATE " + lockTable).Error; err != nil {
			return fmt.Errorf("truncate %s: %w", lockTable, err)
		}
	}
	for _, c := range b.redlock {
		if err := c.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("flush a Redlock server: %w", err)
		}
	}
	return nil
}

// lockCommands is the commands the Redlock servers processed (each INFO call
// taken off), 0 for the other lock services: the cache's Redis is counted by
// loadRun.
func (b *locksBench) lockCommands(ctx context.Context, name string) (int64, error) {
	if name != "redlock" {
		return 0, nil
	}
	var n int64
	for _, c := range b.redlock {
		k, err := redisCommands(ctx, c)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// probeLockService starts one replica with env and stops it once it listens.
// It returns "" when it did, or why not: the replica's last line on stderr,
// with the lock URL (which may carry a password) replaced by its scheme.
func probeLockService(ctx context.Context, bin string, env []string, lockURL string) string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err.Error()
	}
	if err := cmd.Start(); err != nil {
		return err.Error()
	}
	lines := bufio.NewScanner(out)
	listening := false
	if lines.Scan() {
		_, listening = topology.ListenAddr(lines.Text())
	}
	if listening {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	_ = cmd.Wait()
	if listening {
		return ""
	}
	why := lastLines(stderr.Bytes(), 1)
	if why == "" {
		why = "the replica exited before listening"
	}
	if lockURL != "" {
		scheme, _, _ := strings.Cut(lockURL, ":")
		why = strings.ReplaceAll(why, lockURL, scheme+"://…")
	}
	return "stockguard serve: " + strings.TrimPrefix(why, "stockguard: ")
}

// lockedBuffer is a bytes.Buffer written by a process's stderr copier.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.b.Bytes())
}

// loadAverage is the one-minute load average, 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

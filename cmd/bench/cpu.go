package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicks is the unit of /proc/<pid>/stat's times (USER_HZ): 100 on every
// Linux the project runs on; Go has no sysconf without cgo to ask.
const clockTicks = 100

// CPU is CPU time in seconds, user and system, spent by each part of the order
// path: the replicas, Redis, PostgreSQL, and a lock service of its own when
// the locks are not in Redis or PostgreSQL (Redlock's servers, etcd, ZooKeeper,
// Azurite).
type CPU struct {
	Replicas    float64 `json:"replicas_s"`
	Redis       float64 `json:"redis_s"`
	Postgres    float64 `json:"postgres_s"`
	LockService float64 `json:"lock_service_s,omitempty"`
}

// Total is every part together.
func (c CPU) Total() float64 { return c.Replicas + c.Redis + c.Postgres + c.LockService }

func (c CPU) sub(d CPU) CPU {
	return CPU{Replicas: c.Replicas - d.Replicas, Redis: c.Redis - d.Redis, Postgres: c.Postgres - d.Postgres,
		LockService: c.LockService - d.LockService}
}

func (c CPU) add(d CPU) CPU {
	return CPU{Replicas: c.Replicas + d.Replicas, Redis: c.Redis + d.Redis, Postgres: c.Postgres + d.Postgres,
		LockService: c.LockService + d.LockService}
}

func (c CPU) div(n float64) CPU {
	return CPU{Replicas: c.Replicas / n, Redis: c.Redis / n, Postgres: c.Postgres / n, LockService: c.LockService / n}
}

// procStat is what one /proc/<pid>/stat says of a process.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64 // clock ticks
}

// readStat parses /proc/<pid>/stat. The command name is in parentheses and may
// itself hold spaces and parentheses: the fields are counted after the last ')'.
func readStat(proc string, pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[closing+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(string(f[i]), 10, 64); return v }
	return procStat{comm: string(b[open+1 : closing]), ppid: int(n(1)), utime: n(11), stime: n(12), cutime: n(13), cstime: n(14)}, nil
}

// cpuMeter reads the CPU time the order path has spent so far; two readings
// around a window give what the window cost. PostgreSQL is every process named
// postgres: the postmaster's reaped children (a backend that disconnected) are
// in its cutime and cstime, so a backend that ends inside the window is still
// counted.
type cpuMeter struct {
	proc     string // /proc, or a test's copy
	replicas []int
	redis    int   // 0: not a process of this machine, not counted
	locks    []int // a lock service's own processes, if any
}

// newCPUMeter finds Redis's process from its INFO; a Redis on another machine
// (its process_id not a redis-server here) is left out, and said so by the
// zero Redis figure.
func newCPUMeter(ctx context.Context, rdb *redis.Client, replicas []int) cpuMeter {
	m := cpuMeter{proc: "/proc", replicas: replicas}
	m.redis = redisPid(ctx, m.proc, rdb)
	return m
}

// redisPid is the process of the Redis server rdb talks to, 0 when it is not a
// redis-server of this machine.
func redisPid(ctx context.Context, proc string, rdb *redis.Client) int {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	v, ok := infoField(info, "process_id")
	if !ok {
		return 0
	}
	pid, _ := strconv.Atoi(v)
	if st, err := readStat(proc, pid); err == nil && st.comm == "redis-server" {
		return pid
	}
	return 0
}

func (m cpuMeter) read() (CPU, error) {
	var c CPU
	for _, pid := range m.replicas {
		st, err := readStat(m.proc, pid)
		if err != nil {
			return c, fmt.Errorf("replica's cpu: %w", err)
		}
		c.Replicas += secs(st.utime + st.stime)
	}
	if m.redis > 0 {
		st, err := readStat(m.proc, m.redis)
		if err != nil {
			return c, fmt.Errorf("redis's cpu: %w", err)
		}
		c.Redis = secs(st.utime + st.stime)
	}
	for _, pid := range m.locks {
		st, err := readStat(m.proc, pid)
		if err != nil {
			return c, fmt.Errorf("lock service's cpu: %w", err)
		}
		c.LockService += secs(st.utime + st.stime + st.cutime + st.cstime)
	}
	pg, err := m.postgres()
	c.Postgres = pg
	return c, err
}

// memory reads each replica's resident set by kind.
func (m cpuMeter) memory() []Memory {
	mem := make([]Memory, len(m.replicas))
	for i, pid := range m.replicas {
		mem[i] = readMemory(m.proc, pid)
	}
	return mem
}

// postgres sums every postgres process's CPU time, with the postmaster's reaped
// children.
func (m cpuMeter) postgres() (float64, error) {
	entries, err := os.ReadDir(m.proc)
	if err != nil {
		return 0, err
	}
	stats := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(m.proc, pid)
		if err != nil {
			continue // ended meanwhile: a backend's time is in the postmaster's cutime by now
		}
		if st.comm == "postgres" {
			stats[pid] = st
		}
	}
	var ticks int64
	for _, st := range stats {
		ticks += st.utime + st.stime
		if _, child := stats[st.ppid]; !child { // the postmaster
			ticks += st.cutime + st.cstime
		}
	}
	return secs(ticks), nil
}

func secs(ticks int64) float64 { return float64(ticks) / clockTicks }

// cpuSample is a reading of the meter and when it was taken, with each
// replica's memory then.
type cpuSample struct {
	at  time.Time
	cpu CPU
	mem []Memory
}

// sampler reads a meter every interval until stopped, so that the CPU of a
// window known only afterwards (the load generator's load phase, between its
// seeding and its audit) can be read off the samples.
type sampler struct {
	mu      sync.Mutex
	samples []cpuSample
	err     error
	stop    chan struct{}
	done    chan struct{}
}

const sampleEvery = 100 * time.Millisecond

func startSampler(m cpuMeter) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	take := func() {
		c, err := m.read()
		mem := m.memory()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil && s.err == nil {
			s.err = err
		}
		s.samples = append(s.samples, cpuSample{at: time.Now(), cpu: c, mem: mem})
	}
	take()
	go func() {
		defer close(s.done)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				take()
				return
			case <-t.C:
				take()
			}
		}
	}()
	return s
}

// finish stops the sampler and returns its samples, in time order.
func (s *sampler) finish() ([]cpuSample, error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.err
}

// cpuBetween is the CPU spent from one moment to another, each read off the
// samples by linear interpolation between the two around it (the first or
// last sample outside them).
func cpuBetween(samples []cpuSample, from, to time.Time) CPU {
	return cpuAt(samples, to).sub(cpuAt(samples, from))
}

func cpuAt(samples []cpuSample, t time.Time) CPU {
	if len(samples) == 0 {
		return CPU{}
	}
	if !t.After(samples[0].at) {
		return samples[0].cpu
	}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if t.After(b.at) {
			continue
		}
		f := float64(t.Sub(a.at)) / float64(max(b.at.Sub(a.at), 1))
		d := b.cpu.sub(a.cpu)
		return a.cpu.add(CPU{Replicas: f * d.Replicas, Redis: f * d.Redis, Postgres: f * d.Postgres, LockService: f * d.LockService})
	}
	return samples[len(samples)-1].cpu
}

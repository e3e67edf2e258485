package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fakeProc writes /proc/<pid>/stat files: comm, ppid, utime, stime, cutime, cstime.
func fakeProc(t *testing.T, procs map[int][6]string) string {
	t.Helper()
	dir := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		// Fields 1-17 of proc(5), then a few more as the kernel writes them.
		line := strconv.Itoa(pid) + " (" + p[0] + ") S " + p[1] + " 1 1 0 -1 4194560 100 0 0 0 " +
			p[2] + " " + p[3] + " " + p[4] + " " + p[5] + " 20 0 1 0 100 1000 10\n"
		if err := os.WriteFile(filepath.Join(d, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "meminfo"), nil, 0o644); err != nil { // not a pid: skipped
		t.Fatal(err)
	}
	return dir
}

func TestReadStatCountsFieldsAfterTheLastParenthesis(t *testing.T) {
	proc := fakeProc(t, map[int][6]string{7: {"odd) (name", "1", "250", "50", "9", "1"}})
	st, err := readStat(proc, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{comm: "odd) (name", ppid: 1, utime: 250, stime: 50, cutime: 9, cstime: 1}
	if st != want {
		t.Fatalf("got %+v, want %+v", st, want)
	}
}

func TestCPUMeterSumsReplicasRedisAndPostgres(t *testing.T) {
	proc := fakeProc(t, map[int][6]string{
		10: {"stockguard", "1", "100", "50", "0", "0"},
		11: {"stockguard", "1", "200", "0", "0", "0"},
		20: {"redis-server", "1", "30", "20", "0", "0"},
		// The postmaster, with 400 ticks of reaped backends, and two live backends.
		30: {"postgres", "1", "10", "10", "300", "100"},
		31: {"postgres", "30", "100", "0", "7", "7"}, // a backend's own children are not the postmaster's
		32: {"postgres", "30", "50", "50", "0", "0"},
		40: {"bash", "1", "999", "999", "999", "999"},
		50: {"java", "1", "70", "20", "5", "5"}, // a lock service: ZooKeeper, with its reaped children
	})
	m := cpuMeter{proc: proc, replicas: []int{10, 11}, redis: 20, locks: []int{50}}
	got, err := m.read()
	if err != nil {
		t.Fatal(err)
	}
	want := CPU{Replicas: 3.5, Redis: 0.5, Postgres: 6.2, LockService: 1}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := (cpuMeter{proc: proc, replicas: []int{99}}).read(); err == nil {
		t.Fatal("a replica that is gone: want an error, got none")
	}
}

func TestCPUBetweenInterpolates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []cpuSample{
		{at: at(0), cpu: CPU{Replicas: 1}},
		{at: at(100), cpu: CPU{Replicas: 2, Postgres: 1}},
		{at: at(200), cpu: CPU{Replicas: 4, Postgres: 1}},
	}
	cases := []struct {
		from, to int
		want     CPU
	}{
		{50, 150, CPU{Replicas: 1.5, Postgres: 0.5}}, // half of each interval
		{0, 200, CPU{Replicas: 3, Postgres: 1}},
		{-50, 500, CPU{Replicas: 3, Postgres: 1}}, // outside the samples: their ends
		{100, 100, CPU{}},
	}
	for _, c := range cases {
		got := cpuBetween(samples, at(c.from), at(c.to))
		if !near(got.Replicas, c.want.Replicas) || !near(got.Postgres, c.want.Postgres) || got.Redis != 0 {
			t.Errorf("%d..%d ms: got %+v, want %+v", c.from, c.to, got, c.want)
		}
	}
}

func TestSamplerReadsUntilFinished(t *testing.T) {
	proc := fakeProc(t, map[int][6]string{10: {"stockguard", "1", "100", "0", "0", "0"}})
	s := startSampler(cpuMeter{proc: proc, replicas: []int{10}})
	samples, err := s.finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 2 || samples[0].cpu.Replicas != 1 || samples[len(samples)-1].at.Before(samples[0].at) {
		t.Fatalf("samples %+v: want at least the first and the last, in order", samples)
	}
	_, err = startSampler(cpuMeter{proc: proc, replicas: []int{11}}).finish()
	if err == nil {
		t.Fatal("a replica that is not there: want the error, got none")
	}
}

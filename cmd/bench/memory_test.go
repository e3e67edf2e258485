package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A /proc/<pid>/status of a replica, cut to the fields around the ones read.
const replicaStatus = `Name:	stockguard
Umask:	0022
State:	S (sleeping)
Pid:	4242
VmPeak:	 1843560 kB
VmSize:	 1843560 kB
VmHWM:	   72704 kB
VmRSS:	   70656 kB
RssAnon:	   24576 kB
RssFile:	   45056 kB
RssShmem:	    1024 kB
VmData:	  120000 kB
Threads:	9
`

func TestParseMemoryReadsTheThreeFields(t *testing.T) {
	got := parseMemory(replicaStatus)
	want := Memory{RssAnon: 24 << 20, RssFile: 44 << 20, RssShmem: 1 << 20}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := parseMemory("Name:\tstockguard\nVmHWM:\t 1 kB\n"); got != (Memory{}) {
		t.Fatalf("a status without the fields: %+v, want zero", got)
	}
}

func TestReadMemoryFromAProcCopy(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "4242", "status"), []byte(replicaStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	m := cpuMeter{proc: proc, replicas: []int{4242, 4343}}
	got := m.memory()
	if len(got) != 2 || got[0].RssAnon != 24<<20 || got[1] != (Memory{}) {
		t.Fatalf("memory %+v: want the replica's, then zero for the one gone", got)
	}
	if got := readMemory(proc, os.Getpid()); got != (Memory{}) {
		t.Fatalf("pid %s not in the copy: %+v", strconv.Itoa(os.Getpid()), got)
	}
}

func TestPeakMemoryKeepsTheHighestRssAnonInTheWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	mib := func(anon, file int64) Memory { return Memory{RssAnon: anon << 20, RssFile: file << 20} }
	samples := []cpuSample{
		{at: at(0), mem: []Memory{mib(50, 10), mib(1, 1)}}, // before the window: left out
		{at: at(100), mem: []Memory{mib(20, 40), mib(22, 38)}},
		{at: at(200), mem: []Memory{mib(30, 41), mib(25, 45)}},
		{at: at(300), mem: []Memory{mib(28, 48), mib(26, 47)}},
	}
	// The peak's RssFile is the one of its moment, not the highest seen.
	if got, want := peakMemory(samples, at(50), at(300)), mib(30, 41); got != want {
		t.Fatalf("peak %+v, want %+v", got, want)
	}
	// A window between two samples takes them all rather than nothing.
	if got, want := peakMemory(samples, at(110), at(120)), mib(50, 10); got != want {
		t.Fatalf("empty window: %+v, want %+v", got, want)
	}
	if got := peakMemory(nil, at(0), at(1)); got != (Memory{}) {
		t.Fatalf("no samples: %+v", got)
	}
}

func TestFmtMemory(t *testing.T) {
	if got, want := fmtMemory(Memory{RssAnon: 25 << 20, RssFile: 45 << 20}), "25.0 MiB (RssFile 45.0 MiB)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got, want := fmtMemory(Memory{}), fmtMiB(0); got != want {
		t.Fatalf("not measured: %q, want %q", got, want)
	}
}

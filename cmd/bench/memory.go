package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Memory is a replica's resident set by kind at the moment its anonymous part
// peaked: RssAnon is what the process itself allocated (heap, stacks, GC
// metadata), RssFile the file pages it has mapped (above all the binary's own,
// shared by every replica of a machine), RssShmem its shared memory. VmHWM
// (the peak RSS) is their sum's peak; the kernel keeps no peak of each, so the
// bench samples them.
type Memory struct {
	RssAnon  int64 `json:"rss_anon_bytes,omitempty"`
	RssFile  int64 `json:"rss_file_bytes,omitempty"`
	RssShmem int64 `json:"rss_shmem_bytes,omitempty"`
}

// higher is the one of m and n with the larger RssAnon.
func (m Memory) higher(n Memory) Memory {
	if n.RssAnon > m.RssAnon {
		return n
	}
	return m
}

// readMemory reads RssAnon, RssFile and RssShmem from /proc/<pid>/status; a
// process gone or a kernel without them reads as zero.
func readMemory(proc string, pid int) Memory {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "status"))
	if err != nil {
		return Memory{}
	}
	return parseMemory(string(b))
}

// parseMemory takes the three fields out of a /proc/<pid>/status.
func parseMemory(status string) Memory {
	return Memory{RssAnon: statusBytes(status, "RssAnon"), RssFile: statusBytes(status, "RssFile"),
		RssShmem: statusBytes(status, "RssShmem")}
}

// statusBytes is a "kB" field of /proc/<pid>/status in bytes, 0 when missing.
func statusBytes(status, name string) int64 {
	v, ok := infoField(status, name)
	if !ok {
		return 0
	}
	kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return kb << 10
}

// peakMemory is, of the samples from one moment to another, the highest
// RssAnon any replica reached, with the rest of that replica's reading then.
// A window with no sample in it (shorter than the sampling interval) takes the
// samples nearest to it.
func peakMemory(samples []cpuSample, from, to time.Time) Memory {
	var peak Memory
	in := 0
	for _, s := range samples {
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		in++
		for _, m := range s.mem {
			peak = peak.higher(m)
		}
	}
	if in == 0 {
		for _, s := range samples {
			for _, m := range s.mem {
				peak = peak.higher(m)
			}
		}
	}
	return peak
}

// fmtMemory is a peak RssAnon with the RssFile beside it, "-" when not
// measured (a results.json from before they were): fmtMiB's dash.
func fmtMemory(m Memory) string {
	if m.RssAnon <= 0 {
		return fmtMiB(0)
	}
	return fmtMiB(m.RssAnon) + " (RssFile " + fmtMiB(m.RssFile) + ")"
}

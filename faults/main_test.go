//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	faultsOut = flag.String("faults.out", "", "write the per-fault results as JSON to this file")

	binary, loadtestBinary string // built once by TestMain
)

// Settings of every replica: a short lease and short timeouts, so that faults
// bite within seconds.
const (
	lease          = time.Second     // STOCKGUARD_LOCK_TTL
	lockWait       = 2 * time.Second // STOCKGUARD_LOCK_WAIT: waiters outlast a dead holder's lease
	requestTimeout = 3 * time.Second // STOCKGUARD_REQUEST_TIMEOUT
	clientTimeout  = 6 * time.Second // the load generator's: past a request's deadline and a pause

	// recoverySlack is what a waiter may take, past the end of a lease, to find the
	// lock free when no release was announced (the holder died): the lock's poll
	// interval (at most 500ms with pkg/lock's defaults) and scheduling on a loaded
	// 2-core machine with the race detector on.
	recoverySlack = time.Second

	adminToken = "faults-admin-token"
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "stockguard-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "stockguard")
	loadtestBinary = filepath.Join(dir, "loadtest")
	// The replicas carry the race detector when the tests do; the generator never
	// does (it is the yardstick, not what is under test).
	builds := [][]string{{"build", "-o", loadtestBinary, "../loadtest"}, {"build", "-o", binary, "../cmd/stockguard"}}
	if raceEnabled {
		builds[1] = []string{"build", "-race", "-o", binary, "../cmd/stockguard"}
	}
	for _, args := range builds {
		build := exec.CommandContext(context.Background(), "go", args...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			_ = os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	results.report(os.Stdout)
	if *faultsOut != "" {
		if err := results.writeJSON(*faultsOut); err != nil {
			fmt.Fprintln(os.Stderr, "faults.out:", err)
			code = 1
		}
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// strategy is the service strategy under test: STOCKGUARD_FAULTS_STRATEGY, or
// the service's default when it is empty.
func strategy() string { return os.Getenv("STOCKGUARD_FAULTS_STRATEGY") }

func strategyName() string {
	if s := strategy(); s != "" {
		return s
	}
	return "default"
}

// mixSeed is STOCKGUARD_FAULTS_SEED, or a new seed.
func mixSeed(t *testing.T) uint64 {
	t.Helper()
	if v := os.Getenv("STOCKGUARD_FAULTS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("STOCKGUARD_FAULTS_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

// mixDuration is STOCKGUARD_FAULTS_DURATION, 20s by default, between 5s and 10m.
func mixDuration(t *testing.T) time.Duration {
	t.Helper()
	d := 20 * time.Second
	if v := os.Getenv("STOCKGUARD_FAULTS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("STOCKGUARD_FAULTS_DURATION=%q: %v", v, err)
		}
	}
	if d < 5*time.Second || d > 10*time.Minute {
		t.Fatalf("STOCKGUARD_FAULTS_DURATION=%s: want 5s to 10m", d)
	}
	return d
}

// result is one fault's line in the report.
type result struct {
	Fault    string `json:"fault"`
	Strategy string `json:"strategy"`
	Seed     string `json:"seed,omitempty"`
	Passed   bool   `json:"passed"`

	Acknowledged    int      `json:"orders_acknowledged"`     // 201 answers seen by the balancer (replays included once)
	Oversold        int64    `json:"oversold_units"`          // by the API's audit, the database's and the generator's
	LostAcked       int      `json:"lost_acknowledged"`       // acknowledged order ids missing from the API or the database
	FenceRejections float64  `json:"fence_rejections"`        // stockguard_fence_rejections_total, all replicas
	LeasesLost      float64  `json:"leases_lost"`             // stockguard_lock_leases_lost_total, all replicas
	Overlap         string   `json:"overlap"`                 // how two holds were seen overlapping, if they were
	RecoveryMS      *float64 `json:"recovery_ms,omitempty"`   // the longest, of the fault's recoveries (FAULTS.md says from what)
	Errors          int      `json:"errors_5xx"`              // 5xx answers to orders, at the balancer
	Unsettled       int64    `json:"orders_unsettled"`        // lost answers the generator could not learn
	CacheConverged  string   `json:"cache_converged"`         // after traffic stopped
	Detail          string   `json:"detail,omitempty"`        // what the fault did, in its own terms
	DurationS       float64  `json:"duration_s"`              // of the whole test
	FencesMonotonic bool     `json:"fences_monotonic"`        // I3 in the ledger
	Reqs            int64    `json:"http_reqs"`               // the generator's requests
	Replays         int      `json:"idempotent_replays_seen"` // 201 answers replayed under an Idempotency-Key
}

func (r *result) line() string {
	seed := ""
	if r.Seed != "" {
		seed = " seed=" + r.Seed
	}
	return fmt.Sprintf("FAULT %s strategy=%s%s passed=%v oversold=%d lost_acked=%d fence_rejections=%g leases_lost=%g overlap=%q recovery=%s acked=%d errors_5xx=%d unsettled=%d fences_monotonic=%v cache=%s detail=%q",
		r.Fault, r.Strategy, seed, r.Passed, r.Oversold, r.LostAcked, r.FenceRejections, r.LeasesLost, r.Overlap, r.recovery(),
		r.Acknowledged, r.Errors, r.Unsettled, r.FencesMonotonic, r.CacheConverged, r.Detail)
}

// recovered records a time to recover; the longest of a test's counts.
func (r *result) recovered(d time.Duration) {
	v := float64(d) / float64(time.Millisecond)
	if r.RecoveryMS == nil || v > *r.RecoveryMS {
		r.RecoveryMS = &v
	}
}

func (r *result) recovery() string {
	if r.RecoveryMS == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f s", *r.RecoveryMS/1000)
}

type resultLog struct {
	mu   sync.Mutex
	rows []*result
}

var results resultLog

// record logs r as one line and keeps it for the report, whatever the test's
// outcome (set when the test ends).
func record(t *testing.T, r *result) {
	t.Helper()
	start := time.Now()
	r.Strategy = strategyName()
	t.Cleanup(func() {
		r.Passed = !t.Failed()
		r.DurationS = time.Since(start).Seconds()
		t.Log(r.line())
		results.mu.Lock()
		results.rows = append(results.rows, r)
		results.mu.Unlock()
	})
}

// report prints the results as a Markdown table, the one FAULTS.md shows.
func (l *resultLog) report(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| fault | passed | acked | oversold | lost acked | fence rejections | leases lost | overlap | recovery | 5xx | unsettled | fences never down | cache converged |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range l.rows {
		name := r.Fault
		if r.Seed != "" {
			name += " (seed " + r.Seed + ")"
		}
		fmt.Fprintf(w, "| %s | %v | %d | %d | %d | %g | %g | %s | %s | %d | %d | %v | %s |\n", name, r.Passed, r.Acknowledged, r.Oversold,
			r.LostAcked, r.FenceRejections, r.LeasesLost, strings.ReplaceAll(r.Overlap, "|", "/"), r.recovery(), r.Errors, r.Unsettled,
			r.FencesMonotonic, r.CacheConverged)
	}
	fmt.Fprintln(w)
}

func (l *resultLog) writeJSON(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, err := json.MarshalIndent(l.rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

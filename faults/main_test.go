//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/gormstore"
)

var (
	faultsOut       = flag.String("faults.out", "", "write the per-fault results as JSON to this file")
	defaultDatabase = flag.String("faults.default-database", "",
		"when STOCKGUARD_TEST_DATABASE_URL is not set, use this PostgreSQL URL if it answers (make test-faults passes the loopback one)")

	binary, loadtestBinary string // built once by TestMain

	// notReady says why no fault test can run here ("" when they can), as
	// TestMain's preflight found; notReadyFails makes each test fail on it
	// rather than skip: a service named but not answering, or
	// STOCKGUARD_TEST_REQUIRE_REAL=1.
	notReady      string
	notReadyFails bool
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
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run()) // go test -list: nothing runs, nothing to check or report
	}
	if *faultsOut != "" {
		_ = os.Remove(*faultsOut) // a failed run must not leave the last one's results behind
	}
	notReady, notReadyFails = preflight()
	if notReady != "" {
		fmt.Printf("faults: cannot run here: %s\n", notReady)
		os.Exit(finish(m.Run())) // every test stops at once: skipped or failed, with the reason
	}
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
	code := finish(m.Run())
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// finish reports the results (the table, faults.out) and returns the run's exit
// code: m.Run's, or 1 when no fault test ran, so that a run that tested nothing
// never passes.
func finish(code int) int {
	results.report(os.Stdout)
	if *faultsOut != "" {
		if err := results.writeJSON(*faultsOut); err != nil {
			fmt.Fprintln(os.Stderr, "faults.out:", err)
			code = 1
		}
	}
	ran, notRun := results.ran()
	switch {
	case ran == 0 && len(notRun) == 0:
		fmt.Println("FAIL: no fault test ran: none was selected (-run?)")
		code = 1
	case ran == 0:
		why := notReady
		if why == "" {
			why = "see each test's log for why"
		}
		fmt.Printf("FAIL: no fault test ran (%d of %d %s): %s\n", len(notRun), len(notRun), stoppedHow(), why)
		fmt.Println("      The fault tests need PostgreSQL and redis-server: set STOCKGUARD_TEST_DATABASE_URL to a")
		fmt.Println("      PostgreSQL database whose user may create schemas and end sessions, e.g.")
		fmt.Println("      STOCKGUARD_TEST_DATABASE_URL='postgres://postgres@127.0.0.1:5432/test?sslmode=disable' make test-faults")
		fmt.Println("      (make test-faults tries that one itself when the variable is not set), and put redis-server on the PATH.")
		code = 1
	case len(notRun) > 0:
		fmt.Printf("faults: %d fault tests ran; not run: %s\n", ran, strings.Join(notRun, ", "))
	}
	return code
}

// stoppedHow says how the preflight stopped the tests.
func stoppedHow() string {
	if notReadyFails {
		return "failed before injecting anything"
	}
	return "skipped"
}

// preflight checks what every fault test needs, PostgreSQL and redis-server,
// once, and says why the tests cannot run ("" when they can), and whether that
// is a failure rather than a reason to skip. When STOCKGUARD_TEST_DATABASE_URL is
// not set, -faults.default-database is tried, and used (and the variable set)
// when it answers.
func preflight() (reason string, fails bool) {
	requireReal := os.Getenv("STOCKGUARD_TEST_REQUIRE_REAL") == "1"
	var reasons []string
	dbURL := os.Getenv("STOCKGUARD_TEST_DATABASE_URL")
	if dbURL == "" && *defaultDatabase != "" {
		if err := pingPostgres(*defaultDatabase); err != nil {
			fmt.Printf("faults: STOCKGUARD_TEST_DATABASE_URL is not set, and connecting to the default %s failed: %v\n", redact(*defaultDatabase), err)
		} else {
			dbURL = *defaultDatabase
			_ = os.Setenv("STOCKGUARD_TEST_DATABASE_URL", dbURL)
			fmt.Printf("faults: STOCKGUARD_TEST_DATABASE_URL is not set; using the default %s, which answered\n", redact(dbURL))
		}
	}
	switch {
	case dbURL == "":
		reasons = append(reasons, "STOCKGUARD_TEST_DATABASE_URL is not set")
		fails = fails || requireReal
	case !strings.HasPrefix(dbURL, "postgres"):
		reasons = append(reasons, fmt.Sprintf("STOCKGUARD_TEST_DATABASE_URL=%s is not a postgres:// URL", redact(dbURL)))
		fails = true
	default:
		if err := pingPostgres(dbURL); err != nil {
			reasons = append(reasons, fmt.Sprintf("connecting to STOCKGUARD_TEST_DATABASE_URL=%s failed: %v", redact(dbURL), err))
			fails = true
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		reasons = append(reasons, "redis-server is not on the PATH")
		fails = fails || requireReal
	}
	return strings.Join(reasons, "; "), fails
}

// pingPostgres connects to raw and pings it, for 10s at most.
func pingPostgres(raw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		db, err := gormstore.Open(raw)
		if err != nil {
			done <- err
			return
		}
		sqlDB, err := db.DB()
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = sqlDB.Close() }()
		done <- sqlDB.PingContext(ctx)
	}()
	select {
	case err := <-done:
		return innermost(err)
	case <-ctx.Done():
		return errors.New("no answer in 10s")
	}
}

// innermost is the error err wraps at the bottom, such as "dial tcp
// 127.0.0.1:5999: connect: connection refused" under the driver's account of it.
func innermost(err error) error {
	for err != nil {
		next := errors.Unwrap(err)
		if next == nil {
			break
		}
		err = next
	}
	return err
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}

// ready stops the test when the preflight found that no fault test can run:
// skipped, or failed when that is a failure, with the reason.
func ready(t *testing.T) {
	t.Helper()
	switch {
	case notReady == "":
	case notReadyFails:
		t.Fatal(notReady)
	default:
		t.Skip(notReady)
	}
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
	Skipped  bool   `json:"skipped"`
	// NotRun says why the test stopped before injecting anything (skipped, or
	// failed at setup because a service it needs is missing); empty when it ran.
	NotRun string `json:"reason,omitempty"`

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
	FencesReused    int      `json:"fences_reused"`           // transactions that committed a fence another had committed
	FencesDown      int      `json:"fences_down"`             // transactions that committed a fence below the one before
	Reqs            int64    `json:"http_reqs"`               // the generator's requests
	Replays         int      `json:"idempotent_replays_seen"` // 201 answers replayed under an Idempotency-Key

	// Holds is what became of the holds, in the holds tests (holds_test.go).
	Holds *holdFigures `json:"holds,omitempty"`
	// Events is what the stream held against the database, in the events
	// tests (events_test.go).
	Events *eventFigures `json:"events,omitempty"`
	// Client is what the Go client's calls did and met, in the client test
	// (client_test.go).
	Client *clientFigures `json:"client,omitempty"`
}

func (r *result) line() string {
	seed := ""
	if r.Seed != "" {
		seed = " seed=" + r.Seed
	}
	if r.NotRun != "" { // no figures: nothing was measured
		return fmt.Sprintf("FAULT %s strategy=%s%s passed=false skipped=%v reason=%q", r.Fault, r.Strategy, seed, r.Skipped, r.NotRun)
	}
	return fmt.Sprintf("FAULT %s strategy=%s%s passed=%v oversold=%d lost_acked=%d fence_rejections=%g leases_lost=%g overlap=%q recovery=%s acked=%d errors_5xx=%d unsettled=%d fences_monotonic=%v cache=%s detail=%q",
		r.Fault, r.Strategy, seed, r.Passed, r.Oversold, r.LostAcked, r.FenceRejections, r.LeasesLost, r.Overlap, r.recovery(),
		r.Acknowledged, r.Errors, r.Unsettled, r.FencesMonotonic, r.CacheConverged, r.Detail) + r.holds() + r.events()
}

func (r *result) events() string {
	if r.Events == nil {
		return ""
	}
	return " events=" + r.Events.String()
}

func (r *result) holds() string {
	if r.Holds == nil {
		return ""
	}
	return " holds=" + r.Holds.String()
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
		r.Skipped = t.Skipped()
		r.Passed = !t.Failed() && !r.Skipped
		switch {
		case notReady != "" && (r.Skipped || t.Failed()):
			r.NotRun = notReady
		case r.Skipped:
			r.NotRun = "skipped: the test's log says why"
		}
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
		if r.NotRun != "" {
			status := "false (not run: "
			if r.Skipped {
				status = "skipped ("
			}
			fmt.Fprintf(w, "| %s | %s%s) |%s\n", name, status, strings.ReplaceAll(r.NotRun, "|", "/"), strings.Repeat(" – |", 11))
			continue
		}
		fmt.Fprintf(w, "| %s | %v | %d | %d | %d | %g | %g | %s | %s | %d | %d | %v | %s |\n", name, r.Passed, r.Acknowledged, r.Oversold,
			r.LostAcked, r.FenceRejections, r.LeasesLost, strings.ReplaceAll(r.Overlap, "|", "/"), r.recovery(), r.Errors, r.Unsettled,
			r.FencesMonotonic, r.CacheConverged)
	}
	fmt.Fprintln(w)
}

// notRunRow is a test that did not run, in faults.out.
type notRunRow struct {
	Fault     string  `json:"fault"`
	Strategy  string  `json:"strategy"`
	Seed      string  `json:"seed,omitempty"`
	Passed    bool    `json:"passed"`
	Skipped   bool    `json:"skipped"`
	NotRun    string  `json:"reason"`
	DurationS float64 `json:"duration_s"`
}

// ran counts the tests that ran, and names those that did not.
func (l *resultLog) ran() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, notRun := 0, []string{}
	for _, r := range l.rows {
		if r.NotRun != "" {
			notRun = append(notRun, r.Fault)
		} else {
			n++
		}
	}
	return n, notRun
}

func (l *resultLog) writeJSON(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A test that did not run has no figures, not zeros.
	rows := make([]any, 0, len(l.rows))
	for _, r := range l.rows {
		if r.NotRun != "" {
			rows = append(rows, notRunRow{r.Fault, r.Strategy, r.Seed, false, r.Skipped, r.NotRun, r.DurationS})
			continue
		}
		rows = append(rows, r)
	}
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

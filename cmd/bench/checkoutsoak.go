package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/stockguard/stockguard/internal/orders"
	"github.com/stockguard/stockguard/internal/topology"
)

// The checkout soak of issue 31: the load generator's checkout workload (hold,
// think, then confirm, release or abandon the hold to expire) on the default
// strategy, in chunks on one emptied database never analysed, until the
// soak's holds are placed. Its target: the last window of
// holds placed at no less than 90% of the first window's rate. The sweeper
// expires the abandoned holds meanwhile, as a deployment's would.

// checkoutWorkload is where the checkouts go: zipf over 100 SKUs, one unit
// each, so that confirms and the sweeper share SKUs with the holds.
var checkoutWorkload = Workload{Name: "checkout", Title: "checkouts, 100 SKUs, zipf", SKUs: 100, Popularity: "zipf", Stock: 10_000_000}

// The checkout's settings: a short think so that the VUs place holds at the
// service's pace, not their own; a TTL the think never reaches, so that a
// confirm is refused only by the service; the expiry margin the load
// generator asks for (the sweep interval and one lock lease).
const (
	checkoutThink   = 50 * time.Millisecond
	checkoutTTL     = 5 * time.Second
	checkoutMargin  = 7 * time.Second
	checkoutConfirm = 0.6
	checkoutRelease = 0.25
	// checkoutFullHolds is the count; the quick profile's is smaller.
	checkoutFullHolds = 1_000_000
	// checkoutFloorRate bounds the soak as soakFloorRate bounds the orders'.
	checkoutFloorRate = 100
)

// CheckoutSoak is what the checkout soak measured.
type CheckoutSoak struct {
	When     string  `json:"when"`
	Holds    int64   `json:"holds"`  // the goal: holds placed
	Window   int64   `json:"window"` // the first and the last this many holds are compared
	VUs      int     `json:"vus"`
	Workload string  `json:"workload"`
	HoldTTL  string  `json:"hold_ttl"`
	Think    string  `json:"think_time"`
	Confirm  float64 `json:"confirm_share"`
	Release  float64 `json:"release_share"`
	Seconds  float64 `json:"duration_s"`
	TimedOut bool    `json:"timed_out"`
	// Counted is SELECT COUNT(*) FROM reservations at the end.
	Counted int64 `json:"holds_counted"`
	// Chunks are in holds: From and To are the holds placed before and after,
	// Accepted the holds placed, OrdersPerSec holds/s and P99 the hold's.
	Chunks []SoakChunk `json:"chunks"`
	Steps  []SoakStep  `json:"steps"`
	// The target: the first and the last window's holds/s.
	First  float64 `json:"first_holds_per_s"`
	Last   float64 `json:"last_holds_per_s"`
	Ratio  float64 `json:"last_to_first"`
	Pass   bool    `json:"pass"`
	Reason string  `json:"reason,omitempty"`
	// The chunks' audits, summed.
	Confirmed  int64 `json:"holds_confirmed"`
	Released   int64 `json:"holds_released"`
	Expired    int64 `json:"holds_expired"`
	Lost       int64 `json:"units_lost"`
	SoldTwice  int64 `json:"units_sold_twice"`
	Oversold   int64 `json:"oversold"`
	AuditsPass bool  `json:"audits_pass"`
	// Problems are the first problems the failed audits found.
	Problems []string `json:"audit_problems,omitempty"`
}

// checkoutWorkloads are the steps' one workload.
var checkoutWorkloads = []string{checkoutWorkload.Name}

// checkoutSoak runs the checkout chunks on one cluster on emptied tables until
// the soak's holds are placed, or the deadline.
func checkoutSoak(ctx context.Context, o options, bins topology.Binaries, db *gorm.DB, rdb *redis.Client, log *slog.Logger, when string) (*CheckoutSoak, error) {
	w := checkoutWorkload
	res := &CheckoutSoak{When: when, Holds: o.soakHolds, Window: o.soakStep, VUs: o.soakVUs, Workload: w.Title,
		HoldTTL: checkoutTTL.String(), Think: checkoutThink.String(), Confirm: checkoutConfirm, Release: checkoutRelease, AuditsPass: true}
	budget := time.Minute + time.Duration(o.soakHolds/checkoutFloorRate)*time.Second
	deadline := time.Now().Add(budget)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(2*time.Minute))
	defer cancel()
	c, err := startCluster(ctx, o, bins, db, orders.DefaultStrategy, nil, log)
	if err != nil {
		return nil, err
	}
	defer c.stop(ctx, o.redisURL, log)
	log.Info("checkout soak: plan", "strategy", orders.DefaultStrategy, "replicas", o.replicas, "vus", o.soakVUs, "holds", o.soakHolds,
		"window", o.soakStep, "deadline", budget)
	start := time.Now()
	var rate float64
	var count int64
	for i := 0; count < o.soakHolds; i++ {
		d := chunkLength(min(o.soakStep/2, o.soakHolds-count), rate)
		overhead := checkoutTTL + checkoutMargin + 5*time.Second // the audit waits for the abandoned holds
		if n := len(res.Chunks); n > 0 {
			overhead = max(overhead, time.Duration((res.Chunks[n-1].WallS-res.Chunks[n-1].Seconds)*float64(time.Second)))
		}
		if time.Until(deadline) < d+overhead {
			res.TimedOut = true
			log.Warn("checkout soak: stopped at the deadline", "holds", count, "of", o.soakHolds, "deadline", budget)
			break
		}
		t0 := time.Now()
		ch, err := checkoutChunk(ctx, bins.Loadtest, c.lb.URL, w, o.soakVUs, d)
		if err != nil {
			return nil, fmt.Errorf("checkout soak, chunk %d: %w", i+1, err)
		}
		ch.WallS = time.Since(t0).Seconds()
		ch.From, ch.To = count, count+ch.Accepted
		res.Chunks = append(res.Chunks, ch.SoakChunk)
		res.Confirmed, res.Released, res.Expired = res.Confirmed+ch.confirmed, res.Released+ch.released, res.Expired+ch.expired
		res.Lost, res.SoldTwice, res.Oversold = res.Lost+ch.lost, res.SoldTwice+ch.soldTwice, res.Oversold+ch.Oversold
		res.AuditsPass = res.AuditsPass && ch.Consistent
		if len(ch.problems) > 0 {
			log.Warn("checkout soak: the chunk's audit failed", "n", i+1, "problems", ch.problems)
			res.Problems = append(res.Problems, ch.problems...)[:min(len(res.Problems)+len(ch.problems), maxProblems)]
		}
		// The best rate so far sizes the next chunk: a slow chunk (the
		// machine is shared) must not make the next one overshoot the goal.
		count, rate = ch.To, max(rate, ch.OrdersPerSec)
		elapsed := time.Since(start)
		eta := time.Duration(float64(elapsed) / float64(max(count, 1)) * float64(max(o.soakHolds-count, 0)))
		log.Info("checkout soak: chunk", "n", i+1, "holds", count, "of", o.soakHolds, "holds/s", int(ch.OrdersPerSec), "hold_p99_ms", ch.P99,
			"chunk_s", fmt.Sprintf("%.1f", ch.Seconds), "setup_audit_s", fmt.Sprintf("%.1f", ch.WallS-ch.Seconds), "confirmed", ch.confirmed,
			"released", ch.released, "expired", ch.expired, "audit_ok", ch.Consistent, "elapsed", elapsed.Round(time.Second), "eta", eta.Round(time.Second))
		if ch.Accepted == 0 {
			return nil, fmt.Errorf("checkout soak, chunk %d: no hold placed in %s", i+1, d)
		}
	}
	res.Seconds = time.Since(start).Seconds()
	if err := db.WithContext(ctx).Raw("SELECT COUNT(*) FROM reservations").Scan(&res.Counted).Error; err != nil {
		return nil, fmt.Errorf("count holds: %w", err)
	}
	res.Steps = soakSteps(res.Chunks, res.Window, res.Holds, checkoutWorkloads)
	res.judge()
	log.Info("checkout soak: done", "holds", count, "counted", res.Counted, "first_holds/s", int(res.First), "last_holds/s", int(res.Last),
		"last/first", fmt.Sprintf("%.2f", res.Ratio), "pass", res.Pass, "elapsed", time.Since(start).Round(time.Second))
	return res, nil
}

// judge compares the last whole window of holds with the first.
func (s *CheckoutSoak) judge() {
	var full []SoakStep
	for _, st := range s.Steps {
		if st.Full {
			full = append(full, st)
		}
	}
	s.First, s.Last, s.Ratio, s.Pass, s.Reason = 0, 0, 0, false, ""
	if len(full) < 2 {
		s.Reason = fmt.Sprintf("%d whole window(s) of %s holds: nothing to compare", len(full), thousands(s.Window))
		return
	}
	first, last := full[0].rate(checkoutWorkload.Name), full[len(full)-1].rate(checkoutWorkload.Name)
	s.First, s.Last = first.OrdersPerSec, last.OrdersPerSec
	if s.First > 0 {
		s.Ratio = s.Last / s.First
	}
	s.Pass = s.Ratio >= soakTarget && !s.TimedOut
	if s.TimedOut {
		s.Reason = fmt.Sprintf("the soak reached %s of %s holds (stopped at the deadline)", thousands(s.reached()), thousands(s.Holds))
	}
}

func (s *CheckoutSoak) reached() int64 {
	if len(s.Chunks) == 0 {
		return 0
	}
	return s.Chunks[len(s.Chunks)-1].To
}

// checkoutRun is a chunk with its audit's counts.
type checkoutRun struct {
	SoakChunk
	confirmed, released, expired, lost, soldTwice int64
	problems                                      []string // the audit's, the first maxProblems
}

// maxProblems is how many of a failed audit's problems are kept, per chunk
// and in all.
const maxProblems = 5

// checkoutChunk runs the load generator's checkout workload once, on SKUs of
// its own, and reads its summary. A failed audit (exit 98) is a chunk whose
// audit did not pass, not an error.
func checkoutChunk(ctx context.Context, bin, baseURL string, w Workload, vus int, d time.Duration) (checkoutRun, error) {
	cfg := map[string]any{
		"baseURL": baseURL, "adminToken": adminToken,
		"scenarios": map[string]any{"checkout": map[string]any{
			"executor": "constant-vus", "vus": vus, "duration": d.String(),
			"workload": map[string]any{"skus": w.SKUs, "popularity": w.Popularity, "stock": w.Stock, "maxQuantity": 1,
				"checkout": map[string]any{"holdTTL": checkoutTTL.String(), "thinkTime": checkoutThink.String(), "confirm": checkoutConfirm,
					"release": checkoutRelease, "expiryMargin": checkoutMargin.String()}},
		}},
	}
	dir, err := os.MkdirTemp("", "bench-checkout-")
	if err != nil {
		return checkoutRun{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	b, err := json.Marshal(cfg)
	if err != nil {
		return checkoutRun{}, err
	}
	conf, sum := dir+"/checkout.json", dir+"/summary.json"
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return checkoutRun{}, err
	}
	out, err := exec.CommandContext(ctx, bin, "-config", conf, "-summary-json", sum, "-quiet").CombinedOutput()
	var ee *exec.ExitError
	auditFailed := errors.As(err, &ee) && ee.ExitCode() == 98
	if err != nil && !auditFailed {
		return checkoutRun{}, fmt.Errorf("load generator: %w\n%s", err, lastLines(out, 10))
	}
	f, err := os.Open(sum)
	if err != nil {
		return checkoutRun{}, fmt.Errorf("load generator summary: %w\n%s", err, lastLines(out, 10))
	}
	defer func() { _ = f.Close() }()
	r, err := readCheckoutSummary(f)
	if err != nil {
		return r, err
	}
	r.Workload, r.Load = w.Name, loadAverage()
	r.Consistent = r.Consistent && !auditFailed
	return r, nil
}

// readCheckoutSummary reads a checkout run's summary: holds placed over the
// seconds of load, the hold's p99, and the audit.
func readCheckoutSummary(rd io.Reader) (checkoutRun, error) {
	var s struct {
		Seconds float64 `json:"duration_s"`
		Failed  float64 `json:"http_req_failed"`
		Hold    struct {
			P99 float64 `json:"p(99)"`
		} `json:"hold_duration_ms"`
		AuditFailed bool `json:"audit_failed"`
		Audit       struct {
			Oversold   int64    `json:"oversold"`
			Consistent bool     `json:"server_consistent"`
			Unsettled  int64    `json:"orders_unsettled"`
			Problem    string   `json:"audit_problem"`
			Mismatches []string `json:"mismatches"`
			Holds      *struct {
				Problems  []string `json:"problems"`
				Placed    int64    `json:"holds_placed"`
				Confirmed int64    `json:"holds_confirmed"`
				Released  int64    `json:"holds_released"`
				Expired   int64    `json:"holds_expired"`
				Lost      int64    `json:"units_lost"`
				SoldTwice int64    `json:"units_sold_twice"`
			} `json:"holds"`
		} `json:"audit"`
	}
	if err := json.NewDecoder(rd).Decode(&s); err != nil {
		return checkoutRun{}, fmt.Errorf("load generator summary: %w", err)
	}
	h := s.Audit.Holds
	if h == nil {
		return checkoutRun{}, errors.New("load generator summary: no holds in the audit")
	}
	var problems []string
	if s.Audit.Problem != "" {
		problems = append(problems, s.Audit.Problem)
	}
	problems = append(append(problems, s.Audit.Mismatches...), h.Problems...)
	return checkoutRun{problems: problems[:min(len(problems), maxProblems)], SoakChunk: SoakChunk{Accepted: h.Placed, Seconds: s.Seconds, OrdersPerSec: float64(h.Placed) / max(s.Seconds, 1e-9),
		P99: s.Hold.P99, FailedRatio: s.Failed, Oversold: s.Audit.Oversold, Consistent: s.Audit.Consistent && !s.AuditFailed,
		Unsettled: s.Audit.Unsettled},
		confirmed: h.Confirmed, released: h.Released, expired: h.Expired, lost: h.Lost, soldTwice: h.SoldTwice}, nil
}

// markdown writes the checkout soak's part of the Soak section.
func (s *CheckoutSoak) markdown(w io.Writer, out string) {
	fmt.Fprintf(w, "### The checkout soak\n\nThen, on emptied tables and new replicas, the load generator's checkout workload (%s, %d VUs, one unit per hold): each "+
		"iteration holds (TTL %s), thinks %s on average, then confirms (%.0f%%), releases (%.0f%%) or abandons the hold to expire (the rest), in chunks "+
		"sized as the orders' (each on SKUs of its own, with the load generator's audit of every hold at its end, which waits for the abandoned "+
		"ones to expire), until %s holds were placed: %d chunks in %.1f min. A window's holds/s are its holds placed over the "+
		"seconds of load that placed them (a chunk that straddles two windows counts in each, pro rata); its p99 is the chunks' hold p99s weighted by their holds in it.",
		s.Workload, s.VUs, s.HoldTTL, s.Think, 100*s.Confirm, 100*s.Release, thousands(s.Holds), len(s.Chunks), s.Seconds/60)
	if s.Holds != checkoutFullHolds {
		fmt.Fprintf(w, " %s holds, not the issue's %s: the full count takes more than a quarter of an hour on this machine, so the quick profile "+
			"places fewer (`-profile full` or `-soak-holds` sets the count).", thousands(s.Holds), thousands(checkoutFullHolds))
	}
	m := "pass"
	if !s.Pass {
		m = "**miss**"
		if s.Reason != "" {
			m += ": " + s.Reason
		}
	}
	fmt.Fprintf(w, "\n\n**Target: the last %s holds at least %.0f%% of the first %s's holds/s.** First %.0f holds/s, last %.0f: **%.2f**, %s.\n\n",
		thousands(s.Window), soakTarget*100, thousands(s.Window), s.First, s.Last, s.Ratio, m)
	fmt.Fprint(w, "| holds placed | holds/s | hold p99 | load average |\n|---|---:|---:|---:|\n")
	for _, st := range s.Steps {
		span := thousands(st.From) + " – " + thousands(st.To)
		if !st.Full {
			span += " (part)"
		}
		r := st.rate(checkoutWorkload.Name)
		fmt.Fprintf(w, "| %s | %.0f | %.0f ms | %.1f |\n", span, r.OrdersPerSec, r.P99, st.Load)
	}
	fmt.Fprintf(w, "\n![holds/s and the hold's p99 against the holds placed](%s/soak-checkout.png)\n\n", out)
	fmt.Fprintf(w, "Every chunk's audit: %s; %s holds confirmed, %s released, %s expired; %d units lost, %d sold twice, %d oversold. "+
		"Rows in `reservations` at the end: %s (the chunks' placed holds add up to %s).\n",
		map[bool]string{true: "passed", false: "**failed** in at least one chunk"}[s.AuditsPass], thousands(s.Confirmed), thousands(s.Released),
		thousands(s.Expired), s.Lost, s.SoldTwice, s.Oversold, thousands(s.Counted), thousands(s.reached()))
	if len(s.Problems) > 0 {
		fmt.Fprint(w, "\nThe first problems the audits found:\n\n")
		for _, p := range s.Problems {
			fmt.Fprintf(w, "- %s\n", strings.ReplaceAll(p, "\n", " "))
		}
	}
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stockguard/stockguard/internal/orders"
)

// The report leads with issue 31's targets: each row the issue's figure before
// the work ("before", as the issue gives it), its target, and this run's
// figure. The figures come from three files that are measured apart
// (results.json, holds.json with -holds only, soak.json after the report), so
// the section is written again whenever any of them is.

const issueHeading = "## Issue 31: targets"

// issueRow is one row of the table; Mark is pass, **miss**, or – when the run
// did not measure it.
type issueRow struct {
	What, Before, Target, Now, Mark string
}

const notMeasured = "–"

func mark(pass bool) string {
	if pass {
		return "pass"
	}
	return "**miss**"
}

// issueInputs are what the section is made from; any may be nil.
type issueInputs struct {
	r *Results
	h *HoldsResults
	s *SoakResults
}

// issueRows judges issue 31's targets on in.
func issueRows(in issueInputs) []issueRow {
	return []issueRow{
		confirmsRow(in.h),
		burstRow(in.h),
		massExpiryRow(in.h),
		roundTripsRow(in.r),
		replicaCPURow(in.r),
		ceilingShareRow(in.r),
		rssAnonRow(in.r),
		checkoutSoakRow(in.s),
	}
}

// Each row below reads the one file it is judged on (any may be nil, the
// row then a dash), so that a row's figure and mark sit together.

// confirmsRow is the hot SKU's confirms/s against its orders/s in the holds benchmark.
func confirmsRow(h *HoldsResults) issueRow {
	row := issueRow{What: "hot SKU: confirms/s ÷ orders/s (64 VUs)", Before: "0.08×", Target: "≥ 0.8×", Now: notMeasured, Mark: notMeasured}
	if p, ok := h.point("hot"); ok {
		row.Now = fmt.Sprintf("%.2f× (%.0f ÷ %.0f/s, %d VUs)", p.ConfirmRatio, p.Confirms, p.Orders, h.VUs)
		row.Mark = mark(p.ConfirmRatio >= 0.8)
	}
	return row
}

// burstRow is the confirm burst: the median of the bursts' holds confirmed before expiry.
func burstRow(h *HoldsResults) issueRow {
	row := issueRow{What: "confirm burst (200 holds, 4 SKUs): confirmed before expiry", Before: "6-13 of 200", Target: "≥ 190",
		Now: notMeasured, Mark: notMeasured}
	if h != nil && len(h.Bursts) > 0 {
		med, lo, hi := burstSummary(h.Bursts)
		row.Now = fmt.Sprintf("%.0f of %d", med, burstHolds)
		if len(h.Bursts) > 1 {
			row.Now += fmt.Sprintf(" (median of %d bursts, %d-%d)", len(h.Bursts), lo, hi)
		}
		row.Mark = mark(med >= 190)
	}
	return row
}

// massExpiryRow is orders/s during the sweeper's mass expiry against before it.
func massExpiryRow(h *HoldsResults) issueRow {
	row := issueRow{What: "orders/s during a 100,000-hold mass expiry ÷ before it", Before: "0.31×", Target: "≥ 0.8×", Now: notMeasured, Mark: notMeasured}
	if h != nil && h.Sweep != nil {
		sw := h.Sweep
		row.Now = fmt.Sprintf("%.2f× (%.0f ÷ %.0f/s)", sw.Ratio, sw.During, sw.Before)
		if sw.Holds != 100_000 {
			row.Now += fmt.Sprintf(", %s holds", thousands(int64(sw.Holds)))
		}
		if sw.TimedOut {
			row.Now += ", not swept by the deadline"
		}
		row.Mark = mark(sw.Ratio >= 0.8 && !sw.TimedOut)
	}
	return row
}

// roundTripsRow is lock-batch's Redis round trips per order on zipf and multi.
func roundTripsRow(r *Results) issueRow {
	lockBatch := string(orders.StrategyLockBatch)
	row := issueRow{What: "Redis round trips per order, lock-batch, zipf / multi", Before: "9.16 / 28.39 (commands)", Target: "≤ 2 / ≤ 4",
		Now: notMeasured, Mark: notMeasured}
	if z, m, ok := r.costPair(lockBatch, "zipf", "multi"); ok {
		if z.TripsPerOrder > 0 && m.TripsPerOrder > 0 {
			row.Now = fmt.Sprintf("%.2f / %.2f (commands: %.2f / %.2f)", z.TripsPerOrder, m.TripsPerOrder, z.RedisPerOrder, m.RedisPerOrder)
			row.Mark = mark(z.TripsPerOrder <= 2 && m.TripsPerOrder <= 4)
		} else {
			row.Now = fmt.Sprintf("– (commands: %.2f / %.2f)", z.RedisPerOrder, m.RedisPerOrder)
		}
	}
	return row
}

// replicaCPURow is lock-batch's replica CPU per order on the hot SKU.
func replicaCPURow(r *Results) issueRow {
	lockBatch := string(orders.StrategyLockBatch)
	row := issueRow{What: "replica CPU per order, lock-batch hot", Before: "302 µs", Target: "≤ 150 µs", Now: notMeasured, Mark: notMeasured}
	if r != nil {
		if c, ok := r.cost(lockBatch, "hot"); ok {
			row.Now = fmt.Sprintf("%.0f µs", 1e6*c.CPU.Replicas)
			row.Mark = mark(c.CPU.Replicas > 0 && c.CPU.Replicas <= 150e-6)
		}
	}
	return row
}

// ceilingShareRow is the default strategy's orders/s at 256 VUs as a share of the HTTP ceiling.
func ceilingShareRow(r *Results) issueRow {
	row := issueRow{What: "default at 256 VUs ÷ HTTP ceiling", Before: "30%", Target: "≥ 50%", Now: notMeasured, Mark: notMeasured}
	if r != nil {
		d, ok1 := r.point(r.Default, "hot", 256)
		c, ok2 := r.ceilingAt(256)
		if ok1 && ok2 {
			share := d.OrdersPerSec / max(c.ReqsPerSec, 1e-9)
			row.Now = fmt.Sprintf("%.0f%% (%.0f of %.0f/s, hot)", 100*share, d.OrdersPerSec, c.ReqsPerSec)
			row.Mark = mark(share >= 0.5)
		}
	}
	return row
}

// rssAnonRow is the highest RssAnon of the runs at 256 VUs.
func rssAnonRow(r *Results) issueRow {
	row := issueRow{What: "peak RssAnon at 256 VUs", Before: "– (peak RSS 70-74 MiB)", Target: "< 40 MiB", Now: notMeasured, Mark: notMeasured}
	if r != nil {
		// The runs at 256 VUs, every strategy's (RssAnon is sampled per run).
		var peak Memory
		var who string
		for _, x := range r.Runs {
			if x.VUs == 256 && x.Memory.RssAnon > peak.RssAnon {
				peak, who = x.Memory, x.Strategy
			}
		}
		if peak.RssAnon > 0 {
			row.Now = fmt.Sprintf("%s at most (%s)", fmtMemory(peak), who)
			row.Mark = mark(peak.RssAnon < 40<<20)
		}
	}
	return row
}

// checkoutSoakRow is the checkout soak's last holds/s against its first.
func checkoutSoakRow(s *SoakResults) issueRow {
	row := issueRow{What: "checkout soak, last 100k ÷ first 100k holds", Before: "–", Target: "≥ 0.90", Now: notMeasured, Mark: notMeasured}
	if s != nil && s.Checkout != nil && len(s.Checkout.Chunks) > 0 {
		c := s.Checkout
		if c.Ratio > 0 {
			row.Now = fmt.Sprintf("%.2f (%.0f → %.0f holds/s)", c.Ratio, c.First, c.Last)
		} else {
			row.Now = "– (" + c.Reason + ")"
		}
		if c.Holds != checkoutFullHolds {
			row.Now += fmt.Sprintf(", %s holds in all", thousands(c.Holds))
		}
		if !c.AuditsPass {
			row.Now += ", an audit failed"
		}
		row.Mark = mark(c.Pass && c.AuditsPass)
	}
	return row
}

// issueMarkdown writes the section.
func issueMarkdown(w io.Writer, in issueInputs) {
	fmt.Fprintf(w, "%s\n\n", issueHeading)
	fmt.Fprint(w, "Issue 31 (checkout at the speed of orders): each target with the issue's figure before the work, and this run's. "+
		"Ratios are within one run; a dash is a figure this run did not measure.")
	var from []string
	if in.r != nil {
		from = append(from, fmt.Sprintf("the strategies' runs of %s", in.r.Machine.When))
	}
	if in.h != nil {
		from = append(from, fmt.Sprintf("the holds benchmark of %s (`%s`)", in.h.When, in.h.Command))
	}
	if in.s != nil {
		from = append(from, fmt.Sprintf("the soak of %s (`%s`)", in.s.When, in.s.Command))
	}
	if len(from) > 0 {
		fmt.Fprintf(w, " Figures from %s.", strings.Join(from, "; "))
	}
	fmt.Fprint(w, "\n\n| what | before | target | this run | |\n|---|---:|---:|---:|---|\n")
	for _, row := range issueRows(in) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", row.What, row.Before, row.Target, row.Now, row.Mark)
	}
}

// loadIssueInputs fills what in lacks from the output folder: results.json,
// holds.json and soak.json, each if it is there. Of the holds, the newer of
// results.json's and holds.json's (-holds only writes the latter alone).
func loadIssueInputs(out string, in issueInputs) (issueInputs, error) {
	var errs []error
	if in.r == nil {
		var r Results
		if err := readJSON(filepath.Join(out, "results.json"), &r); err == nil {
			in.r = &r
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if in.h == nil && in.r != nil {
		in.h = in.r.Holds
	}
	var h HoldsResults
	if err := readJSON(filepath.Join(out, "holds.json"), &h); err == nil {
		if in.h == nil || h.When > in.h.When {
			in.h = &h
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if in.s == nil {
		s, err := readSoak(soakJSON(out))
		if err == nil {
			in.s = s
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return in, errors.Join(errs...)
}

// writeIssueSection writes the section into the report again, from in and
// the output folder: in place, or first when the report has none.
func writeIssueSection(o options, in issueInputs) error {
	in, err := loadIssueInputs(o.out, in)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(o.markdown)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var section bytes.Buffer
	issueMarkdown(&section, in)
	return os.WriteFile(o.markdown, spliceLead(old, section.Bytes(), issueHeading), 0o644)
}

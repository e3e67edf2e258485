package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// HoldAudit is the checkout part of the audit: every hold the run made, read
// back once all of them have ended, and its units.
type HoldAudit struct {
	Placed    int64 `json:"holds_placed"`    // 201 answers, and holds a replay found at teardown
	Refused   int64 `json:"holds_refused"`   // 409: stock was short, nothing held
	Unsettled int64 `json:"holds_unsettled"` // lost answers that a replay could not settle
	Confirmed int64 `json:"holds_confirmed"` // by the status the service reads at the end
	Released  int64 `json:"holds_released"`
	Expired   int64 `json:"holds_expired"`
	StillHeld int64 `json:"holds_still_held"` // after their expiry: never right

	UnitsHeld      int64 `json:"units_held"`
	UnitsConfirmed int64 `json:"units_confirmed"`
	UnitsReleased  int64 `json:"units_released"` // released holds, and what partial confirms did not confirm
	UnitsExpired   int64 `json:"units_expired"`
	// UnitsLost are units neither sold nor back in available once every hold
	// ended, and units confirmed to a client that the service does not count
	// as sold; UnitsSoldTwice are units the service sold beyond what clients
	// were sold (a hold confirmed twice, an order from an ended hold).
	UnitsLost      int64 `json:"units_lost"`
	UnitsSoldTwice int64 `json:"units_sold_twice"`

	WaitedS  float64  `json:"waited_s"` // the wait for holds left to expire
	Problems []string `json:"problems,omitempty"`

	complete bool             // every hold and order could be read
	soldBy   map[string]int64 // units confirmed per SKU, as clients expect them sold
}

// holdRun is every hold of the run, for the audit.
type holdRun struct {
	holds     []*holdRec
	refused   int64
	unsettled int64
	until     time.Time // every hold has surely ended, and its units are back, by then
	waiting   int       // holds the audit waits for
	waited    time.Duration
	waitErr   error
}

// settleHolds gathers the holds, and asks again about those whose answers were
// lost: the same POST with the same key replays the hold if the first request
// made one (or makes it now). A hold found so is released at once, so that the
// audit need not wait for it.
func settleHolds(ctx context.Context, c *client, stats []*vuStats) *holdRun {
	hr := &holdRun{}
	var pend []pendingHold
	for _, v := range stats {
		hr.holds = append(hr.holds, v.holds...)
		hr.refused += v.holdsRefused
		pend = append(pend, v.holdsUnknown...)
	}
	found := make([]*holdRec, len(pend))
	lastTry := make([]time.Time, len(pend))
	refused := make([]bool, len(pend))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, p := range pend {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a := c.replayTo(ctx, "/v1/reservations", p.key, p.body)
			lastTry[i] = time.Now()
			switch {
			case a.err == nil && a.status == http.StatusCreated:
				found[i] = c.releaseFound(ctx, p, holdOf(a))
			case definite(a):
				refused[i] = true
			}
		})
	}
	wg.Wait()
	for i, p := range pend {
		switch {
		case found[i] != nil:
			hr.holds = append(hr.holds, found[i])
		case refused[i]:
			hr.refused++
		default:
			// A hold may have been made by the last try, after all: its units are
			// surely back by the end of its ttl from then.
			hr.unsettled++
			hr.until = later(hr.until, lastTry[i].Add(p.ttl+p.margin))
			hr.waiting++
		}
	}
	for _, h := range hr.holds {
		if h.outcome != outConfirmed && h.outcome != outReleased {
			hr.until = later(hr.until, h.deadline)
			hr.waiting++
		}
	}
	return hr
}

// releaseFound releases a hold that a replay at teardown found.
func (c *client) releaseFound(ctx context.Context, p pendingHold, h holdDoc) *holdRec {
	if h.ID == "" {
		return nil
	}
	rec := &holdRec{id: h.ID, items: h.Items, sentAt: p.sentAt, ttl: p.ttl, intent: intentRelease, outcome: outUnknown,
		deadline: time.Now().Add(p.ttl + p.margin)}
	a := c.send(ctx, http.MethodPost, "/v1/reservations/"+h.ID+"/release", nil, map[string]string{"Idempotency-Key": randomKey()}, c.timeout)
	switch {
	case a.err == nil && a.status == http.StatusOK:
		rec.outcome = outReleased
	case a.err == nil && a.status == http.StatusGone:
		rec.outcome = outExpired
	}
	return rec
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// waitForHolds waits until every hold left to expire is past its expiry plus
// the margin (the service's sweep and one lock lease), when its units must be
// back in available (I6). ctx's end (an interrupt) cuts the wait short, and
// the audit then says so.
func waitForHolds(ctx context.Context, log *slog.Logger, hr *holdRun) {
	d := time.Until(hr.until)
	if d <= 0 {
		return
	}
	log.Info("waiting for the holds left to expire", "holds", hr.waiting, "wait", d.Round(time.Millisecond))
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		hr.waitErr = fmt.Errorf("the wait for holds to expire was cut short after %s (%w): holds may not have ended",
			time.Since(start).Round(time.Millisecond), ctx.Err())
	case <-t.C:
	}
	hr.waited = time.Since(start)
}

// holdRead is a hold as read back at the end, and its order if it has one.
type holdRead struct {
	doc   holdDoc
	order *order
	err   error
}

// auditHolds reads every hold back (and the order of each confirmed one), a
// few at a time, and judges each against what the client did with it.
func auditHolds(ctx context.Context, c *client, hr *holdRun) *HoldAudit {
	h := &HoldAudit{Refused: hr.refused, Unsettled: hr.unsettled, WaitedS: hr.waited.Seconds(), complete: true,
		soldBy: map[string]int64{}}
	if hr.waitErr != nil {
		h.Problems = append(h.Problems, hr.waitErr.Error())
	}
	reads := make([]holdRead, len(hr.holds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, rec := range hr.holds {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reads[i] = c.readHold(ctx, rec.id)
		})
	}
	wg.Wait()
	for i, rec := range hr.holds {
		h.judge(rec, reads[i])
	}
	const most = 20 // the rest are counted: one broken rule repeats itself
	if n := len(h.Problems); n > most {
		h.Problems = append(h.Problems[:most], fmt.Sprintf("and %d more", n-most))
	}
	return h
}

func (c *client) readHold(ctx context.Context, id string) holdRead {
	var rd holdRead
	hdr := map[string]string{"Authorization": "Bearer " + c.admin}
	a := c.send(ctx, http.MethodGet, "/v1/reservations/"+id, nil, hdr, c.timeout)
	switch {
	case a.err != nil:
		rd.err = a.err
		return rd
	case a.status != http.StatusOK:
		rd.err = fmt.Errorf("GET /v1/reservations/%s: status %d", id, a.status)
		return rd
	}
	if err := json.Unmarshal(a.body, &rd.doc); err != nil {
		rd.err = fmt.Errorf("GET /v1/reservations/%s: %w", id, err)
		return rd
	}
	if rd.doc.OrderID != "" {
		var o order
		if err := c.adminCall(ctx, http.MethodGet, "/v1/orders/"+rd.doc.OrderID, "", &o); err != nil {
			rd.err = err
			return rd
		}
		rd.order = &o
	}
	return rd
}

// expect is what a hold may read at the end, by what the client did and learned.
func (rec *holdRec) expect() []string {
	switch rec.outcome {
	case outConfirmed:
		return []string{"confirmed"}
	case outReleased:
		return []string{"released"}
	case outExpired, outNone:
		return []string{"expired"}
	}
	switch rec.intent { // the answer was lost: it happened, or the hold expired first
	case intentConfirm:
		return []string{"confirmed", "expired"}
	case intentRelease:
		return []string{"released", "expired"}
	}
	return []string{"expired"}
}

func (rec *holdRec) did() string {
	switch {
	case rec.outcome == outConfirmed:
		return "confirmed it (201)"
	case rec.outcome == outReleased:
		return "released it (200)"
	case rec.outcome == outExpired:
		return "was told it expired (410)"
	case rec.intent == intentConfirm:
		return "confirmed it, the answer lost"
	case rec.intent == intentRelease:
		return "released it, the answer lost"
	}
	return "abandoned it"
}

func units(items []item) int64 {
	var n int64
	for _, it := range items {
		n += int64(it.Quantity)
	}
	return n
}

// judge checks one hold as read back, and counts its units.
func (h *HoldAudit) judge(rec *holdRec, rd holdRead) {
	problem := func(format string, args ...any) {
		h.Problems = append(h.Problems, "hold "+rec.id+": "+fmt.Sprintf(format, args...))
	}
	h.Placed++
	held := units(rec.items)
	h.UnitsHeld += held
	if rd.err != nil {
		h.complete = false
		problem("cannot be read: %v", rd.err)
		return
	}
	d := rd.doc
	if !sameItems(d.Items, rec.items) {
		problem("holds %v, the client held %v", d.Items, rec.items)
	}
	if want := rec.expect(); !slices.Contains(want, d.Status) {
		problem("reads %q (want %s): the client %s", d.Status, strings.Join(want, " or "), rec.did())
	}
	switch d.Status {
	case "confirmed":
		h.Confirmed++
		if rd.order == nil {
			h.complete = false
			problem("confirmed, with no order_id")
			return
		}
		o := rd.order
		if rec.orderID != "" && o.ID != rec.orderID {
			problem("became order %s; the confirm answered order %s", o.ID, rec.orderID)
		}
		if rec.intent == intentConfirm {
			if !sameItems(o.Items, rec.confirm) {
				problem("order %s has %v; the client confirmed %v", o.ID, o.Items, rec.confirm)
			}
			for _, it := range rec.confirm {
				h.soldBy[it.SKU] += int64(it.Quantity)
			}
		}
		if o.ReservationID != "" && o.ReservationID != rec.id {
			problem("order %s names reservation %s", o.ID, o.ReservationID)
		}
		if o.Status != "" && o.Status != "placed" {
			problem("order %s is %s", o.ID, o.Status)
		}
		c := units(o.Items)
		h.UnitsConfirmed += c
		h.UnitsReleased += max(0, held-c)
	case "released", "expired":
		if d.Status == "released" {
			h.Released++
			h.UnitsReleased += held
		} else {
			h.Expired++
			h.UnitsExpired += held
		}
		if d.OrderID != "" {
			problem("%s, yet became order %s", d.Status, d.OrderID)
		}
	case "held":
		h.StillHeld++
		problem("still held after its expiry (expires_at %s)", d.ExpiresAt.Format(time.RFC3339Nano))
	default:
		problem("unknown status %q", d.Status)
	}
}

// failed reports whether a checkout run's audit fails the run.
func (a Audit) failed() bool {
	h := a.Holds
	return h != nil && (a.Oversold > 0 || !a.Consistent || !a.ServerAudit || a.AuditProblem != "" || len(a.Mismatches) > 0 ||
		a.Reserved != 0 || h.UnitsLost > 0 || h.UnitsSoldTwice > 0 || h.StillHeld > 0 || len(h.Problems) > 0)
}

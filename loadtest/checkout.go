package main

import (
	"context"
	"encoding/json"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// holdRec is one hold the run made: what the client held, what it did with the
// hold and what it learned. The audit reads the hold back and compares.
type holdRec struct {
	id       string
	items    []item        // held, as the 201 answered
	sentAt   time.Time     // the first request with its key: the hold is no older
	ttl      time.Duration // as asked for
	slack    time.Duration // how coarse the service's time stamps are
	deadline time.Time     // its units are surely back by then: answer + ttl + margin
	intent   intent
	outcome  outcome
	confirm  []item // what a confirm asked for (every unit held when not partial)
	orderID  string // the order a 201 confirm answered
}

type intent uint8

const (
	intentAbandon intent = iota // left to expire, also when the run ended while thinking
	intentConfirm
	intentRelease
)

type outcome uint8

const (
	outNone      outcome = iota // nothing sent: the hold must expire
	outConfirmed                // 201 to a confirm
	outReleased                 // 200 to a release
	outExpired                  // 410, once the hold was due to expire
	outUnknown                  // the answer was lost or unexpected: the audit reads what happened
)

// pendingHold is a hold request whose outcome the client did not learn.
type pendingHold struct {
	key    string
	body   []byte
	sentAt time.Time
	ttl    time.Duration
	margin time.Duration
}

// holdDoc is a hold as the service answers it.
type holdDoc struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	Items     []item    `json:"items"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	OrderID   string    `json:"order_id,omitempty"`
}

// Named checks of the checkout workload.
const (
	chkHold           = "hold: 201 or 409"
	chkHoldBody       = "hold: the units asked for, until created_at + ttl"
	chkHoldReplay     = "hold: a retry replays the hold"
	chkProblem        = "problem+json on errors"
	chkConfirm        = "confirm: 201, or 410 once expired"
	chkConfirmOrder   = "confirm: an order of the units confirmed"
	chkConfirmReplay  = "confirm: a retry replays the order"
	chkRelease        = "release: 200 and released, or 410 once expired"
	chkReleaseReplay  = "release: a retry replays the release"
	chkAuditHolds     = "audit: every hold ended as the client left it"
	chkAuditSoldTwice = "audit: no unit sold twice"
	chkAuditLost      = "audit: no unit lost"
	// The audit's checks of every run that orders.
	chkAuditAgree    = "audit: clients and service agree on units sold"
	chkAuditOversold = "audit: nothing oversold, I1 holds"
	chkAuditEvents   = "audit: the stock events tell every SKU's counters"
	// With locations: each holds I1, as GET /v1/audit also says.
	chkAuditLocations = "audit: every location's counts hold I1, and GET /v1/audit agrees"
)

// Answers that are not failed requests (http_req_failed): a 409 is an answer
// of the business (stock short, a hold ended another way, a key still running),
// judged by the named checks, as orders' 409s are.
func holdOK(s int) bool { return s == http.StatusCreated || s == http.StatusConflict }
func confirmOK(s int) bool {
	return s == http.StatusCreated || s == http.StatusGone || s == http.StatusConflict
}
func releaseOK(s int) bool {
	return s == http.StatusOK || s == http.StatusGone || s == http.StatusConflict
}

// checkout is one iteration of the checkout workload: hold, think, then confirm,
// release or abandon the hold to expire.
func (wk *worker) checkout(ctx context.Context, vu *vuStats, scheduled time.Time) {
	co := wk.w.Checkout
	r := vu.rng
	since := time.Now()
	if wk.arriv {
		since = scheduled
	}
	lines := mergeItems(wk.lines(r))
	ttl := time.Duration(co.HoldTTL)
	body := appendHold(make([]byte, 0, 80+48*len(lines)), lines, ttl)
	sentAt := time.Now()
	a, b, retried := wk.postIdem(ctx, vu, r, kindHold, "/v1/reservations", body, since, holdOK)
	if a.err == nil {
		checkAs(vu, chkHold, holdOK(a.status))
		problemCheck(vu, a.answer)
	}
	final := a
	if retried {
		if definite(a.answer) && definite(b.answer) {
			checkAs(vu, chkHoldReplay, a.status == b.status && holdOf(a.answer).ID == holdOf(b.answer).ID &&
				(b.status != http.StatusCreated || b.replayed))
		}
		if !definite(a.answer) || b.status == http.StatusCreated {
			final = b // a 201 proves a hold, whichever attempt it answered
		}
		if a.status == http.StatusCreated && b.status == http.StatusCreated && holdOf(a.answer).ID != holdOf(b.answer).ID {
			// The retry made a second hold: the client keeps one; the other is
			// left to expire, and the audit expects that.
			if extra := wk.held(vu, a.answer, lines, sentAt); extra != nil {
				vu.holds = append(vu.holds, extra)
			}
		}
	}
	var rec *holdRec
	switch {
	case final.err == nil && final.status == http.StatusCreated:
		rec = wk.held(vu, final.answer, lines, sentAt)
	case final.err == nil && final.status == http.StatusConflict && !stillRunning(final.answer):
		vu.holdsRefused++
	default: // no answer, a 5xx, or still running: asked again at teardown
		vu.holdsUnknown = append(vu.holdsUnknown, pendingHold{key: a.key, body: body, sentAt: sentAt, ttl: ttl,
			margin: time.Duration(co.ExpiryMargin)})
	}
	if rec != nil {
		vu.holds = append(vu.holds, rec)
		if think(ctx, r, time.Duration(co.ThinkTime)) {
			switch u := r.Float64(); {
			case u < co.Confirm:
				wk.confirmHold(ctx, vu, r, rec)
			case u < co.Confirm+co.Release:
				wk.releaseHold(ctx, vu, r, rec)
			}
		}
	}
	if ctx.Err() == nil {
		vu.iterations++
		wk.c.rec.iteration(vu.sh, time.Since(since))
	}
}

// held reads a 201 answer into a hold record, checking it.
func (wk *worker) held(vu *vuStats, a answer, asked []item, sentAt time.Time) *holdRec {
	h := holdOf(a)
	ttl := time.Duration(wk.w.Checkout.HoldTTL)
	// Stamps are truncated (to the millisecond by stockguard; a database may keep
	// whole seconds), and clocks of one machine agree to well within 100 ms.
	slack := 100 * time.Millisecond
	if h.ExpiresAt.Nanosecond() == 0 {
		slack = time.Second
	}
	// created_at is stamped when the request arrives, expires_at once the hold is
	// made (after any wait for the lock) on the database's clock: the difference
	// is the ttl and at most the request's time, and a second for two clocks.
	lived := h.ExpiresAt.Sub(h.CreatedAt)
	checkAs(vu, chkHoldBody, h.ID != "" && h.Status == "held" && sameItems(h.Items, asked) &&
		lived > ttl-slack && lived < ttl+time.Since(sentAt)+time.Second)
	if h.ID == "" {
		return nil
	}
	items := h.Items
	if len(items) == 0 {
		items = asked
	}
	// Made before this answer, so expired by now + ttl.
	return &holdRec{id: h.ID, items: items, sentAt: sentAt, ttl: ttl, slack: slack,
		deadline: time.Now().Add(ttl + time.Duration(wk.w.Checkout.ExpiryMargin))}
}

// late reports whether a 410 answered at `at` may be right: the hold was made
// after its first request was sent, so it cannot expire before that + ttl.
func (h *holdRec) late(at time.Time) bool { return !at.Before(h.sentAt.Add(h.ttl - h.slack)) }

func (wk *worker) confirmHold(ctx context.Context, vu *vuStats, r *mrand.Rand, rec *holdRec) {
	rec.intent, rec.confirm = intentConfirm, rec.items
	var body []byte // no body: every unit held
	if r.Float64() < wk.w.Checkout.PartialConfirm {
		if part := partial(r, rec.items); part != nil {
			rec.confirm, body = part, appendOrder(nil, part)
		}
	}
	a, b, retried := wk.postIdem(ctx, vu, r, kindConfirm, "/v1/reservations/"+rec.id+"/confirm", body, time.Now(), confirmOK)
	at := time.Now()
	decided := func(x keyed) bool {
		return x.err == nil && (x.status == http.StatusCreated || x.status == http.StatusGone)
	}
	if retried && decided(a) && decided(b) {
		checkAs(vu, chkConfirmReplay, a.status == b.status && orderID(a.body) == orderID(b.body) &&
			(b.status != http.StatusCreated || b.replayed))
	}
	final := a
	if retried && (!decided(a) || b.status == http.StatusCreated) {
		final = b
	}
	if final.err != nil {
		rec.outcome = outUnknown
		return
	}
	problemCheck(vu, final.answer)
	switch final.status {
	case http.StatusCreated:
		var o order
		_ = json.Unmarshal(final.body, &o)
		checkAs(vu, chkConfirm, true)
		checkAs(vu, chkConfirmOrder, o.ID != "" && sameItems(o.Items, rec.confirm) &&
			(o.ReservationID == "" || o.ReservationID == rec.id))
		rec.outcome, rec.orderID = outConfirmed, o.ID
	case http.StatusGone:
		checkAs(vu, chkConfirm, rec.late(at))
		rec.outcome = outExpired
	default: // a 409 (released?), a 422 or a 5xx: the audit reads what happened
		checkAs(vu, chkConfirm, false)
		rec.outcome = outUnknown
	}
}

func (wk *worker) releaseHold(ctx context.Context, vu *vuStats, r *mrand.Rand, rec *holdRec) {
	rec.intent = intentRelease
	a, b, retried := wk.postIdem(ctx, vu, r, kindRelease, "/v1/reservations/"+rec.id+"/release", nil, time.Now(), releaseOK)
	at := time.Now()
	decided := func(x keyed) bool { return x.err == nil && (x.status == http.StatusOK || x.status == http.StatusGone) }
	if retried && decided(a) && decided(b) {
		checkAs(vu, chkReleaseReplay, a.status == b.status && (b.status != http.StatusOK || b.replayed))
	}
	final := a
	if retried && !decided(a) {
		final = b
	}
	if final.err != nil {
		rec.outcome = outUnknown
		return
	}
	problemCheck(vu, final.answer)
	switch final.status {
	case http.StatusOK:
		checkAs(vu, chkRelease, holdOf(final.answer).Status == "released")
		rec.outcome = outReleased
	case http.StatusGone:
		checkAs(vu, chkRelease, rec.late(at))
		rec.outcome = outExpired
	default: // a 409 (confirmed?) or a 5xx: the audit reads what happened
		checkAs(vu, chkRelease, false)
		rec.outcome = outUnknown
	}
}

// keyed is an answer and the Idempotency-Key its request carried.
type keyed struct {
	answer
	key string
}

// postIdem is one POST with an Idempotency-Key, as the order workload sends
// orders: with the Retry share it is sent twice with the same key, and with
// AbandonFirst its first attempt is given up before the answer (a client that
// lost it). It returns the first answer and, when retried, the second.
func (wk *worker) postIdem(ctx context.Context, vu *vuStats, r *mrand.Rand, kind reqKind, path string, body []byte, since time.Time, ok func(int) bool) (first, second keyed, retried bool) {
	key := randomKey()
	hdr := map[string]string{"Idempotency-Key": key}
	retried = r.Float64() < wk.w.Retry
	if retried && r.Float64() < wk.w.AbandonFirst {
		_ = wk.c.send(ctx, http.MethodPost, path, body, hdr, time.Millisecond)
		vu.abandoned++
	}
	first = keyed{wk.postKeyed(ctx, vu, kind, path, body, hdr, since, ok), key}
	if retried {
		second = keyed{wk.postKeyed(ctx, vu, kind, path, body, hdr, time.Now(), ok), key}
	}
	return first, second, retried
}

// postKeyed sends a POST; an answer that the first request with its key is
// still running is followed by another try, as a client would.
func (wk *worker) postKeyed(ctx context.Context, vu *vuStats, kind reqKind, path string, body []byte, hdr map[string]string, since time.Time, ok func(int) bool) answer {
	for try := 0; ; try++ {
		a := wk.c.doAs(ctx, vu, kind, http.MethodPost, path, body, hdr, since, ok)
		if a.status != http.StatusConflict || !stillRunning(a) || try == 50 {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(20 * time.Millisecond): // the client's back-off before asking again
		}
		since = time.Now()
	}
}

func problemCheck(vu *vuStats, a answer) {
	if a.status >= 400 {
		checkAs(vu, chkProblem, strings.HasPrefix(a.contentType, "application/problem+json"))
	}
}

// think waits a think time, uniform in 0.5x..1.5x of mean; false if the run
// ended first (the hold is then abandoned).
func think(ctx context.Context, r *mrand.Rand, mean time.Duration) bool {
	if mean <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(time.Duration(float64(mean) * (0.5 + r.Float64())))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// partial picks fewer units than held, at least one; nil when only one is held.
func partial(r *mrand.Rand, held []item) []item {
	total := 0
	for _, it := range held {
		total += it.Quantity
	}
	if total < 2 {
		return nil
	}
	qs := make([]int, len(held))
	sum := 0
	for i, it := range held {
		qs[i] = r.IntN(it.Quantity + 1)
		sum += qs[i]
	}
	if sum == 0 {
		qs[0], sum = 1, 1
	}
	for i := 0; sum == total; i++ { // all of them: give one back
		if qs[i] > 0 {
			qs[i]--
			sum--
		}
	}
	var out []item
	for i, it := range held {
		if qs[i] > 0 {
			out = append(out, item{SKU: it.SKU, Quantity: qs[i]})
		}
	}
	return out
}

// mergeItems adds up the lines of each SKU (at most 1000 units, the service's
// limit per line), sorted by SKU, so that a hold's answer can be compared.
func mergeItems(lines []item) []item {
	by := map[string]int{}
	for _, it := range lines {
		by[it.SKU] = min(1000, by[it.SKU]+it.Quantity)
	}
	out := make([]item, 0, len(by))
	for sku, q := range by {
		out = append(out, item{SKU: sku, Quantity: q})
	}
	slices.SortFunc(out, func(a, b item) int { return strings.Compare(a.SKU, b.SKU) })
	return out
}

// sameItems compares two lists of lines as units per SKU.
func sameItems(a, b []item) bool {
	units := map[string]int{}
	for _, it := range a {
		units[it.SKU] += it.Quantity
	}
	for _, it := range b {
		units[it.SKU] -= it.Quantity
	}
	for _, n := range units {
		if n != 0 {
			return false
		}
	}
	return true
}

// appendHold writes {"items":[...],"ttl":"10s"}.
func appendHold(b []byte, lines []item, ttl time.Duration) []byte {
	b = appendOrder(b, lines)
	b = b[:len(b)-1] // the closing brace
	b = append(b, `,"ttl":"`...)
	b = append(b, ttl.String()...)
	return append(b, `"}`...)
}

func holdOf(a answer) holdDoc {
	var h holdDoc
	_ = json.Unmarshal(a.body, &h)
	return h
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	sgclient "github.com/stockguard/stockguard/pkg/client"
)

// client talks to the service over HTTP only, counting the bytes on the wire.
// Its hot loop (orders, holds, reads, cancels) uses fasthttp, whose client
// costs a fraction of net/http's CPU per request (no goroutines per
// connection, pooled buffers), so that the generator is not what limits a
// run, and keeps its own retries with the same Idempotency-Key (settle), since
// it must count every attempt and answer. pkg/client, on net/http, would
// measure the generator rather than the service. The operator's calls around
// the run (locations, seeding restocks) go through pkg/client (api).
type client struct {
	api    *sgclient.Client // the admin token's, for setup
	apiErr error            // why there is no api (a base URL it cannot use)
	base   string
	admin  string
	// bearer is every request's Authorization unless it names its own: the
	// API key's (-api-key), else the admin token's.
	bearer  string
	timeout time.Duration
	fast    *fasthttp.Client
	lv      *live
	rec     *recorder
}

type countingConn struct {
	net.Conn
	lv *live
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.lv.bytesIn.Add(int64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.lv.bytesOut.Add(int64(n))
	return n, err
}

func newClient(base, admin, apiKey string, timeout time.Duration, lv *live, rec *recorder) *client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	fast := &fasthttp.Client{
		DialTimeout: func(addr string, timeout time.Duration) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout) // the request's time left
			defer cancel()
			c, err := dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countingConn{Conn: c, lv: lv}, nil
		},
		MaxConnsPerHost: 100_000, // one connection per VU, as k6 keeps them
		// Below the service's (60s) and usual balancers' idle timeouts, so that a
		// connection the server closed is not used for a POST, which is not retried;
		// LIFO keeps the connections in use warm.
		MaxIdleConnDuration:           30 * time.Second,
		ConnPoolStrategy:              fasthttp.LIFO,
		ReadTimeout:                   timeout,
		WriteTimeout:                  timeout,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
	}
	bearer := ""
	if key := cmp.Or(apiKey, admin); key != "" {
		bearer = "Bearer " + key
	}
	c := &client{base: strings.TrimRight(base, "/"), admin: admin, bearer: bearer, timeout: timeout, lv: lv, rec: rec, fast: fast}
	// Setup's calls are few: a round of retries (busy, a lost answer) of up to
	// twice a request's timeout is worth more than failing the run.
	c.api, c.apiErr = sgclient.New(c.base, sgclient.WithAPIKey(admin), sgclient.WithUserAgent("stockguard-loadtest"),
		sgclient.WithHTTPClient(&http.Client{Timeout: timeout}),
		sgclient.WithRetry(sgclient.RetryPolicy{MaxElapsed: 2 * timeout}))
	return c
}

type answer struct {
	status      int
	contentType string
	body        []byte
	replayed    bool // Idempotent-Replayed: true
	err         error
}

// send makes one request within ctx's deadline and the client's timeout.
func (c *client) send(ctx context.Context, method, path string, body []byte, hdr map[string]string, timeout time.Duration) answer {
	if err := ctx.Err(); err != nil {
		return answer{err: err}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.SetRequestURI(c.base + path)
	req.Header.SetMethod(method)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", c.bearer)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	err := c.fast.DoDeadline(req, resp, deadline)
	a := answer{err: err}
	if err == nil {
		a.status, a.contentType = resp.StatusCode(), string(resp.Header.ContentType())
		a.body = append([]byte(nil), resp.Body()...)
		a.replayed = string(resp.Header.Peek("Idempotent-Replayed")) == "true"
	}
	fasthttp.ReleaseRequest(req)
	fasthttp.ReleaseResponse(resp)
	return a
}

// do sends one request and records it; since is when its latency starts (the
// scheduled start, for the first request of an arrival-rate iteration).
func (c *client) do(ctx context.Context, vu *vuStats, method, path string, body []byte, hdr map[string]string, since time.Time, ok func(int) bool) answer {
	return c.doAs(ctx, vu, kindOther, method, path, body, hdr, since, ok)
}

// doAs is do for a request with a latency metric of its own.
func (c *client) doAs(ctx context.Context, vu *vuStats, kind reqKind, method, path string, body []byte, hdr map[string]string, since time.Time, ok func(int) bool) answer {
	a := c.send(ctx, method, path, body, hdr, c.timeout)
	if ctx.Err() != nil && a.err != nil {
		return a // the run ended under this request: not an answer
	}
	d := time.Since(since)
	failed := a.err != nil || !ok(a.status)
	vu.reqs++
	if failed {
		vu.failed++
		c.lv.failed.Add(1)
	}
	c.lv.reqs.Add(1)
	c.rec.request(vu.sh, kind, time.Now(), d, failed)
	return a
}

// checkAs is one check: every check has a name, as in k6, and is listed in the
// summaries with its own passes and fails.
func checkAs(vu *vuStats, name string, pass bool) {
	vu.checks++
	if !pass {
		vu.checksFail++
	}
	if vu.named == nil {
		vu.named = map[string]*checkCount{}
	}
	n := vu.named[name]
	if n == nil {
		n = &checkCount{}
		vu.named[name] = n
	}
	if pass {
		n.Passes++
	} else {
		n.Fails++
	}
}

// worker is one scenario's workload.
type worker struct {
	c     *client
	w     Workload
	skus  []string
	locs  []string // the locations of the run, for named lines
	zipf  func(r *mrand.Rand) int
	arriv bool
}

func newWorker(c *client, w Workload, arrival bool) *worker {
	wk := &worker{c: c, w: w, arriv: arrival, locs: locationIDs(w.Locations)}
	for i := range w.SKUs {
		wk.skus = append(wk.skus, fmt.Sprintf("%s-%d", w.Prefix, i))
	}
	if w.Popularity == "zipf" {
		// Zipf with s=1.1 over the SKUs: SKU 0 is the hottest.
		cdf := make([]float64, w.SKUs)
		var sum float64
		for i := range cdf {
			sum += 1 / math.Pow(float64(i+1), 1.1)
			cdf[i] = sum
		}
		wk.zipf = func(r *mrand.Rand) int {
			x := r.Float64() * sum
			lo, hi := 0, len(cdf)-1
			for lo < hi {
				mid := (lo + hi) / 2
				if cdf[mid] < x {
					lo = mid + 1
				} else {
					hi = mid
				}
			}
			return lo
		}
	}
	return wk
}

func (wk *worker) pick(r *mrand.Rand) string {
	if wk.zipf != nil {
		return wk.skus[wk.zipf(r)]
	}
	return wk.skus[r.IntN(len(wk.skus))]
}

// lines picks an order's (or a hold's) lines: one SKU, or two to three for the
// MultiSKU share.
func (wk *worker) lines(r *mrand.Rand) []item {
	lines := []item{{SKU: wk.pick(r), Quantity: 1 + r.IntN(wk.w.MaxQuantity)}}
	if r.Float64() < wk.w.MultiSKU && len(wk.skus) > 1 {
		for range 1 + r.IntN(2) {
			lines = append(lines, item{SKU: wk.pick(r), Quantity: 1 + r.IntN(wk.w.MaxQuantity)})
		}
	}
	return lines
}

type item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
	// loc, when set, is the location the line names; whole is a line sent
	// with "split": false. Neither is in the service's answers.
	loc   string
	whole bool
}

type order struct {
	ID            string `json:"id"`
	Status        string `json:"status,omitempty"`
	Items         []item `json:"items"`
	ReservationID string `json:"reservation_id,omitempty"`
}

// Named checks of the order workload.
const (
	chkOrder       = "order: 201 or 409"
	chkOrderReplay = "order: a retry replays the first answer"
	chkCancel      = "cancel: 200, cancelled"
)

func orderOK(s int) bool  { return s == http.StatusCreated || s == http.StatusConflict }
func cancelOK(s int) bool { return s == http.StatusOK || s == http.StatusConflict }

// iterate is one order: maybe multi-SKU, maybe retried with an Idempotency-Key
// (maybe after abandoning the first attempt), maybe cancelled.
func (wk *worker) iterate(ctx context.Context, vu *vuStats, scheduled time.Time) {
	if wk.w.Checkout != nil {
		wk.checkout(ctx, vu, scheduled)
		return
	}
	r := vu.rng
	since := time.Now()
	if wk.arriv {
		since = scheduled
	}
	lines := wk.lines(r)
	wk.kinds(r, lines)
	body := appendOrder(make([]byte, 0, 64+48*len(lines)), lines)
	sent := body // the items as the answer writes them
	if located(lines) {
		sent = plainOrder(lines)
	}
	// Every order carries an Idempotency-Key, as a careful client's do: an order
	// whose answer is lost can then be asked about again at teardown, so that the
	// audit counts it rather than guess.
	hdr := map[string]string{"Idempotency-Key": randomKey()}
	retry := r.Float64() < wk.w.Retry
	if retry && r.Float64() < wk.w.AbandonFirst {
		// The client gives up before the answer, as one whose connection broke.
		_ = wk.c.send(ctx, http.MethodPost, "/v1/orders", body, hdr, time.Millisecond)
		vu.abandoned++
	}
	a := wk.place(ctx, vu, body, hdr, since)
	if a.err == nil {
		checkAs(vu, chkOrder, orderOK(a.status))
		problemCheck(vu, a)
	}
	final := a
	if retry {
		b := wk.place(ctx, vu, body, hdr, time.Now())
		if definite(a) && definite(b) {
			checkAs(vu, chkOrderReplay, a.status == b.status && orderID(a.body) == orderID(b.body))
		}
		if !definite(a) {
			final = b
		}
	}
	switch {
	case final.status == http.StatusCreated:
		vu.accepted++
		o := soldOrder(final.body, sent, lines)
		if wk.w.Locations > 1 {
			pass, split := checkAllocations(final.body, lines)
			checkAs(vu, chkAllocated, pass)
			vu.split += split
		}
		for _, it := range o.Items {
			vu.soldUnits[it.SKU] += int64(it.Quantity)
		}
		cancel := r.Float64() < wk.w.Cancel
		if cancel && o.ID == "" {
			o.ID = orderID(final.body)
		}
		if cancel && o.ID != "" {
			c := wk.c.do(ctx, vu, http.MethodPost, "/v1/orders/"+o.ID+"/cancel", nil, nil, time.Now(), cancelOK)
			switch {
			case c.status == http.StatusOK:
				checkAs(vu, chkCancel, true)
				vu.cancelled++
				for _, it := range o.Items {
					vu.soldUnits[it.SKU] -= int64(it.Quantity)
				}
			case c.err != nil || c.status >= 500: // it may have been cancelled: ask at teardown
				vu.cancelsUnknown = append(vu.cancelsUnknown, o)
			default:
				checkAs(vu, chkCancel, false)
			}
		}
	case final.status == http.StatusConflict && !stillRunning(final):
		vu.refused++
	default: // no answer, a 503, or still running: ask again at teardown
		vu.unknown = append(vu.unknown, pending{key: hdr["Idempotency-Key"], body: body})
	}
	if ctx.Err() == nil {
		vu.iterations++
		wk.c.rec.iteration(vu.sh, time.Since(since))
	}
}

// definite reports whether an answer settles an order: placed, or refused for
// want of stock.
func definite(a answer) bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusConflict && !stillRunning(a))
}

// stillRunning: the first request with this key still runs (409
// idempotency-key-conflict): ask again, it is no refusal.
func stillRunning(a answer) bool { return bytes.Contains(a.body, []byte("idempotency-key-conflict")) }

// pending is an order whose outcome the client did not learn.
type pending struct {
	key  string
	body []byte
}

// place sends an order; with an Idempotency-Key, an answer that the first request
// with that key is still running is followed by another try, as a client would.
func (wk *worker) place(ctx context.Context, vu *vuStats, body []byte, hdr map[string]string, since time.Time) answer {
	return wk.postKeyed(ctx, vu, kindOther, "/v1/orders", body, hdr, since, orderOK)
}

// appendOrder writes {"items":[{"sku":...,"quantity":...}]}, with a line's
// "location" and "split": false when it has them: SKU names are <prefix>-<n>
// (the prefix is checked to need no escaping) and location ids need none, so
// no encoder is needed on the hot path.
func appendOrder(b []byte, lines []item) []byte {
	b = append(b, `{"items":[`...)
	for i, it := range lines {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sku":"`...)
		b = append(b, it.SKU...)
		b = append(b, `","quantity":`...)
		b = strconv.AppendInt(b, int64(it.Quantity), 10)
		if it.loc != "" {
			b = append(b, `,"location":"`...)
			b = append(b, it.loc...)
			b = append(b, '"')
		}
		if it.whole {
			b = append(b, `,"split":false`...)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// soldOrder is what a 201 answer to an order says was sold. When the answer
// writes the items exactly as they were sent (as the service does: the same
// keys in the same order, no spaces), they are the lines sent, and the answer is
// not decoded: decoding it with encoding/json was a sixth of the generator's CPU
// per order, spent between an answer and the VU's next request. Any other answer
// is decoded, so that items the service changed are counted as it says. The ID
// is only read on the decoded path; the caller asks for it when it needs it.
func soldOrder(answer, sent []byte, lines []item) order {
	// sent is {"items":[...]}: its middle is the "items":[...] member, whose
	// closing bracket anchors the match to the whole list.
	if len(sent) > 2 && bytes.Contains(answer, sent[1:len(sent)-1]) {
		return order{Items: lines}
	}
	var o order
	_ = json.Unmarshal(answer, &o)
	return o
}

func orderID(b []byte) string {
	var o order
	_ = json.Unmarshal(b, &o)
	return o.ID
}

func randomKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

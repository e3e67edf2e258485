//go:build faults

package faults

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// loseHeader asks the balancer to forward an order, record the replica's answer
// and drop the connection instead of passing the answer on: the client loses a
// response the service did send.
const loseHeader = "X-Faults-Lose-Response"

// balancer is a round-robin HTTP balancer in front of the replicas, as nginx is
// in the compose topology. It also sees every answer to an order, so it records
// what the invariants are checked against and when each replica decided:
//
//   - every order id acknowledged with a 201;
//   - decisions on the hot SKU: a 201 that is not a replay, or a 409 for want of
//     stock. Both are made under the SKU's lock, so a replica's decisions tell
//     when it could take the lock; time to recover is measured on them.
//   - the answers to orders by status, per replica.
type balancer struct {
	url string
	tr  *http.Transport

	mu        sync.Mutex
	backends  []string // base URL per replica index; "" when out of rotation
	next      int
	acked     map[string]int // order id -> replica index of its first 201
	decisions []decision
	statuses  []map[int]int     // per replica index: answers to orders by status
	lost      map[string]answer // Idempotency-Key -> the answer the client lost
	replays   int
	unknown   int    // 503 outcome-unknown answers to orders: the commit's answer was lost
	hot       string // the SKU whose decisions count; "" for every SKU
	probe     string // a second SKU whose decisions count, the test's own probes' ("" for none)
	inFlight  atomic.Int64
}

type decision struct {
	at, began time.Time // answered, and when the balancer got the request
	replica   int
}

type answer struct {
	status int
	id     string
	err    error
}

func startBalancer(t *testing.T, n int) *balancer {
	t.Helper()
	b := &balancer{
		tr:       &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		backends: make([]string, n), acked: map[string]int{}, statuses: make([]map[int]int, n), lost: map[string]answer{},
	}
	for i := range b.statuses {
		b.statuses[i] = map[int]int{}
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); b.tr.CloseIdleConnections() })
	b.url = "http://" + ln.Addr().String()
	return b
}

// set puts a replica's URL in rotation, or takes the index out with "".
func (b *balancer) set(idx int, url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backends[idx] = url
}

func (b *balancer) pick() (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range b.backends {
		i := b.next % len(b.backends)
		b.next++
		if b.backends[i] != "" {
			return i, b.backends[i]
		}
	}
	return -1, ""
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	lose := r.Header.Get(loseHeader) != ""
	idx, base := b.pick()
	if base == "" {
		b.fail(w, lose, "no replica in rotation")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		b.fail(w, lose, err.Error())
		return
	}
	out.Header = r.Header.Clone()
	out.Header.Del(loseHeader)
	resp, err := b.tr.RoundTrip(out)
	if err != nil {
		if r.Context().Err() == nil && r.Method == http.MethodPost && r.URL.Path == "/v1/orders" {
			b.mu.Lock()
			b.statuses[idx][http.StatusBadGateway]++ // the replica died or reset the connection
			b.mu.Unlock()
		}
		b.fail(w, lose, "replica: "+err.Error())
		return
	}
	rb, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		b.fail(w, lose, "replica: "+err.Error())
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/orders" {
		b.recordOrder(idx, began, body, resp, rb, r.Header.Get("Idempotency-Key"), lose)
	}
	if lose {
		panic(http.ErrAbortHandler) // net/http drops the connection: the answer is lost
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(rb)
}

// fail answers 502, or, for a request whose answer is to be lost, nothing.
func (b *balancer) fail(w http.ResponseWriter, lose bool, msg string) {
	if lose {
		panic(http.ErrAbortHandler)
	}
	http.Error(w, msg, http.StatusBadGateway)
}

func (b *balancer) recordOrder(idx int, began time.Time, req []byte, resp *http.Response, body []byte, key string, lose bool) {
	now := time.Now()
	var o struct {
		ID string `json:"id"`
	}
	if resp.StatusCode == http.StatusCreated {
		_ = json.Unmarshal(body, &o)
	}
	var in struct {
		Items []struct {
			SKU string `json:"sku"`
		} `json:"items"`
	}
	_ = json.Unmarshal(req, &in)
	b.mu.Lock()
	defer b.mu.Unlock()
	hot := b.hot == ""
	for _, it := range in.Items {
		hot = hot || it.SKU == b.hot || (b.probe != "" && it.SKU == b.probe)
	}
	replayed := resp.Header.Get("Idempotent-Replayed") == "true"
	b.statuses[idx][resp.StatusCode]++
	if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte("problems.md#outcome-unknown")) {
		b.unknown++
	}
	switch {
	case resp.StatusCode == http.StatusCreated && o.ID != "":
		if _, ok := b.acked[o.ID]; !ok {
			b.acked[o.ID] = idx
		}
		if replayed {
			b.replays++
		} else if hot {
			b.decisions = append(b.decisions, decision{at: now, began: began, replica: idx})
		}
	case resp.StatusCode == http.StatusConflict && bytes.Contains(body, []byte("problems.md#insufficient-stock")) && !replayed && hot:
		b.decisions = append(b.decisions, decision{at: now, began: began, replica: idx})
	}
	if lose && key != "" {
		b.lost[key] = answer{status: resp.StatusCode, id: o.ID}
	}
}

// decisionCount is how many decisions replicas accepted by keep made.
func (b *balancer) decisionCount(keep func(idx int) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, d := range b.decisions {
		if keep(d.replica) {
			n++
		}
	}
	return n
}

// firstDecision returns the earliest decision after t by a replica accepted by
// keep.
func (b *balancer) firstDecision(after time.Time, keep func(idx int) bool) (time.Time, bool) {
	return b.earliest(keep, func(d decision) bool { return d.at.After(after) })
}

// firstDecisionBegun returns the earliest decision by a replica accepted by
// keep on a request the balancer got after t: unlike firstDecision, never a
// commit that was on its way before t and answered just after it.
func (b *balancer) firstDecisionBegun(after time.Time, keep func(idx int) bool) (time.Time, bool) {
	return b.earliest(keep, func(d decision) bool { return d.began.After(after) })
}

// earliest is the time of the earliest decision that in accepts, by a replica
// accepted by keep.
func (b *balancer) earliest(keep func(idx int) bool, in func(decision) bool) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first time.Time
	for _, d := range b.decisions {
		if in(d) && keep(d.replica) && (first.IsZero() || d.at.Before(first)) {
			first = d.at
		}
	}
	return first, !first.IsZero()
}

// outcomesUnknown is how many orders were answered 503 outcome-unknown.
func (b *balancer) outcomesUnknown() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unknown
}

// longestGap is the longest time in [from, to] without a decision by a replica
// accepted by keep.
func (b *balancer) longestGap(from, to time.Time, keep func(idx int) bool) time.Duration {
	b.mu.Lock()
	var at []time.Time
	for _, d := range b.decisions {
		if keep(d.replica) && d.at.After(from) && d.at.Before(to) {
			at = append(at, d.at)
		}
	}
	b.mu.Unlock()
	slices.SortFunc(at, time.Time.Compare)
	gap, prev := time.Duration(0), from
	for _, t := range append(at, to) {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return gap
}

// errors5xx counts 5xx answers to orders from replicas accepted by keep.
func (b *balancer) errors5xx(keep func(idx int) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for i, m := range b.statuses {
		if !keep(i) {
			continue
		}
		for s, c := range m {
			if s >= 500 {
				n += c
			}
		}
	}
	return n
}

func (b *balancer) ackedIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.acked))
	for id := range b.acked {
		out = append(out, id)
	}
	return out
}

func (b *balancer) lostAnswer(key string) (answer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.lost[key]
	return a, ok
}

func anyReplica(int) bool { return true }

func only(idx int) func(int) bool { return func(i int) bool { return i == idx } }

func except(idx int) func(int) bool { return func(i int) bool { return i != idx } }

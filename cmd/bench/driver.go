package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// driver is a small closed-model HTTP client for the holds benchmark: orders,
// holds and confirms go through the same code, so that their figures differ by
// what the service does and not by the client.
type driver struct {
	base string
	hc   *http.Client
	log  *slog.Logger
	key  string // the bench client's API key: the workload's credential
}

// newDriver returns a driver of the cluster at base, which calls as a client
// of its own: it makes the client and its key with the admin token first, so
// that the workload's requests take the path of a real caller's (a key
// looked up, scopes checked), while seeding and audits keep the admin token.
func newDriver(ctx context.Context, base string, vus int, log *slog.Logger) (*driver, error) {
	tr := &http.Transport{MaxIdleConns: 2 * vus, MaxIdleConnsPerHost: 2 * vus, IdleConnTimeout: 30 * time.Second}
	d := &driver{base: base, hc: &http.Client{Transport: tr, Timeout: 15 * time.Second}, log: log}
	if err := d.newClient(ctx); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// The bench client's limits: far above any load of the bench, which measures
// the service and not its rate limiter.
const (
	benchClientRate    = 1_000_000
	benchClientMaxHeld = 1_000_000_000
)

// newClient makes the bench client (orders, holds, reads) and a key for it,
// with the admin token, and keeps the key.
func (d *driver) newClient(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{"name": "bench",
		"scopes":                 []string{"orders:write", "orders:read", "holds:write", "stock:read"},
		"max_units_held_per_sku": benchClientMaxHeld,
		"rate_limit":             map[string]any{"per_second": benchClientRate, "burst": benchClientRate}})
	status, b, err := d.call(ctx, http.MethodPost, "/v1/clients", body, "", true)
	var c struct{ ID string }
	if err == nil && status == http.StatusCreated {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || status != http.StatusCreated || c.ID == "" {
		return fmt.Errorf("the bench client: POST /v1/clients: %d %s %w", status, b, err)
	}
	status, b, err = d.call(ctx, http.MethodPost, "/v1/clients/"+c.ID+"/keys", nil, "", true)
	var k struct{ Secret string }
	if err == nil && status == http.StatusCreated {
		err = json.Unmarshal(b, &k)
	}
	if err != nil || status != http.StatusCreated || k.Secret == "" {
		return fmt.Errorf("the bench client's key: %d %w", status, err) // the answer holds the secret: not printed
	}
	d.key = k.Secret
	return nil
}

func (d *driver) close() { d.hc.CloseIdleConnections() }

// call sends one request, with the admin token (admin) or the bench client's
// key, and reads the answer (at most 1 MiB of it).
func (d *driver) call(ctx context.Context, method, path string, body []byte, key string, admin bool) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	credential := adminToken
	if !admin && d.key != "" {
		credential = d.key
	}
	req.Header.Set("Authorization", "Bearer "+credential)
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// seed restocks every SKU of w through the admin API.
func (d *driver) seed(ctx context.Context, w Workload) error {
	for _, sku := range skuNames(w) {
		status, b, err := d.call(ctx, http.MethodPost, "/v1/skus/"+sku+"/restock", fmt.Appendf(nil, `{"quantity":%d}`, w.Stock), "", true)
		if err != nil {
			return fmt.Errorf("seed %s: %w", sku, err)
		}
		if status != http.StatusOK && status != http.StatusCreated {
			return fmt.Errorf("seed %s: %d %s", sku, status, b)
		}
	}
	return nil
}

// audit asks for the deep audit until it finds I1 holding, three times at
// most, a second apart: the service reads the counters and their recount in
// two statements, and a request the client gave up on at the end of a run may
// still commit between them.
func (d *driver) audit(ctx context.Context) (oversold int64, consistent bool, err error) {
	for try := 1; ; try++ {
		oversold, consistent, err = d.auditOnce(ctx, try == 3)
		if err != nil || consistent || try == 3 {
			return oversold, consistent, err
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// auditOnce is one deep audit: I1 on the counters, and the counters against
// their recount from the ledger, the order lines and the hold lines. With
// last, the SKUs at fault are logged.
func (d *driver) auditOnce(ctx context.Context, last bool) (oversold int64, consistent bool, err error) {
	status, b, err := d.call(ctx, http.MethodGet, "/v1/audit?deep=true", nil, "", true)
	if err != nil {
		return 0, false, fmt.Errorf("audit: %w", err)
	}
	if status != http.StatusOK {
		return 0, false, fmt.Errorf("audit: %d %s", status, b)
	}
	var a struct {
		Oversold   int64             `json:"oversold"`
		Consistent bool              `json:"consistent"`
		SKUs       []json.RawMessage `json:"skus"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return 0, false, fmt.Errorf("audit: %w", err)
	}
	if !a.Consistent && last {
		// The SKUs at fault, as the service counted and recounted them: what a
		// report of the failure needs.
		var bad []string
		for _, raw := range a.SKUs {
			var s struct {
				Consistent bool `json:"consistent"`
			}
			if json.Unmarshal(raw, &s) == nil && !s.Consistent && len(bad) < 5 {
				bad = append(bad, string(raw))
			}
		}
		d.log.Warn("audit: I1 does not hold", "oversold", a.Oversold, "skus", strings.Join(bad, " "))
	}
	return a.Oversold, a.Consistent, nil
}

func skuNames(w Workload) []string {
	out := make([]string, w.SKUs)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", w.Name, i)
	}
	return out
}

// picker chooses a SKU as the load generator does: uniform, or zipf with s=1.1
// (SKU 0 the hottest).
func picker(w Workload) func(r *mrand.Rand) string {
	skus := skuNames(w)
	if w.Popularity != "zipf" {
		return func(r *mrand.Rand) string { return skus[r.IntN(len(skus))] }
	}
	cdf := make([]float64, len(skus))
	var sum float64
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), 1.1)
		cdf[i] = sum
	}
	return func(r *mrand.Rand) string {
		i, _ := slices.BinarySearch(cdf, r.Float64()*sum)
		return skus[min(i, len(skus)-1)]
	}
}

// op is one request of a VU; it answers the status, or errPoolEmpty when there
// is nothing left to do.
type op func(ctx context.Context, r *mrand.Rand) (int, error)

var errPoolEmpty = errors.New("no hold left to confirm")

func newKey() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// orderOp places an order of one unit, with an Idempotency-Key, as the load
// generator does in the strategies' runs.
func (d *driver) orderOp(w Workload) op {
	pick := picker(w)
	return func(ctx context.Context, r *mrand.Rand) (int, error) {
		body := fmt.Appendf(nil, `{"items":[{"sku":%q,"quantity":1}]}`, pick(r))
		status, _, err := d.call(ctx, http.MethodPost, "/v1/orders", body, newKey(), false)
		return status, err
	}
}

// holdOp holds one unit for ttl, with an Idempotency-Key, and keeps the hold's
// id in pool for the confirms.
func (d *driver) holdOp(w Workload, ttl time.Duration, pool *holdPool) op {
	pick := picker(w)
	return func(ctx context.Context, r *mrand.Rand) (int, error) {
		body := fmt.Appendf(nil, `{"items":[{"sku":%q,"quantity":1}],"ttl":%q}`, pick(r), ttl.String())
		status, b, err := d.call(ctx, http.MethodPost, "/v1/reservations", body, newKey(), false)
		if err == nil && status == http.StatusCreated {
			var h struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(b, &h); err != nil || h.ID == "" {
				return 0, fmt.Errorf("hold answer %q: %w", b, err)
			}
			pool.add(h.ID)
		}
		return status, err
	}
}

// confirmOp confirms the next hold of pool, whole, with an Idempotency-Key.
func (d *driver) confirmOp(pool *holdPool) op {
	return func(ctx context.Context, _ *mrand.Rand) (int, error) {
		id, ok := pool.take()
		if !ok {
			return 0, errPoolEmpty
		}
		status, _, err := d.call(ctx, http.MethodPost, "/v1/reservations/"+id+"/confirm", nil, newKey(), false)
		return status, err
	}
}

// holdPool is the holds made, each confirmed at most once.
type holdPool struct {
	mu   sync.Mutex
	ids  []string
	next int
}

func (p *holdPool) add(id string) {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
}

func (p *holdPool) take() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= len(p.ids) {
		return "", false
	}
	p.next++
	return p.ids[p.next-1], true
}

func (p *holdPool) left() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids) - p.next
}

// OpRun is one run of one kind of request.
type OpRun struct {
	Workload string           `json:"workload"`
	Op       string           `json:"op"`
	VUs      int              `json:"vus"`
	OK       int64            `json:"ok"`
	Refused  int64            `json:"refused"`
	Failed   int64            `json:"failed"`
	FailedBy map[string]int64 `json:"failed_by,omitempty"` // by HTTP status, or "error"
	Seconds  float64          `json:"duration_s"`
	PerSec   float64          `json:"ok_per_s"`
	P50      float64          `json:"p50_ms"`
	P99      float64          `json:"p99_ms"`
	// Done are the times of the successes, from the run's start (ns), when asked for.
	Done []int64 `json:"-"`
}

// rate is the run's successes per second in [from, to), from its completion
// times (Done, in ns from start); 0 for an empty window.
func (r OpRun) rate(start, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	at := func(t time.Time) int64 { return int64(t.Sub(start)) }
	i := sort.Search(len(r.Done), func(i int) bool { return r.Done[i] >= at(from) })
	j := sort.Search(len(r.Done), func(i int) bool { return r.Done[i] >= at(to) })
	return float64(j-i) / to.Sub(from).Seconds()
}

// drive runs op on vus VUs for d (or until ctx ends, or op has nothing left to
// do), each sending its next request when the last is answered. 201 is a
// success, 409 a refusal, anything else a failure. With times set it keeps
// each success's time.
func drive(ctx context.Context, vus int, d time.Duration, o op, times bool) OpRun {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type tally struct {
		ok, refused, failed int64
		failedBy            map[string]int64
		lat                 []float64
		done                []int64
	}
	tallies := make([]tally, vus)
	start := time.Now()
	var wg sync.WaitGroup
	var seed atomic.Uint64
	seed.Store(uint64(start.UnixNano()))
	for i := range vus {
		wg.Go(func() {
			r := mrand.New(mrand.NewPCG(seed.Add(1), uint64(i)))
			t := &tallies[i]
			for ctx.Err() == nil {
				t0 := time.Now()
				status, err := o(ctx, r)
				switch {
				case errors.Is(err, errPoolEmpty):
					return
				case err != nil && ctx.Err() != nil:
					return // cut by the end of the run, not a failure
				}
				t.lat = append(t.lat, float64(time.Since(t0).Microseconds())/1000)
				switch {
				case err == nil && status == http.StatusCreated:
					t.ok++
					if times {
						t.done = append(t.done, int64(time.Since(start)))
					}
				case err == nil && status == http.StatusConflict:
					t.refused++
				default:
					t.failed++
					why := "error"
					if err == nil {
						why = strconv.Itoa(status)
					}
					t.failedBy = addCounts(t.failedBy, map[string]int64{why: 1})
				}
			}
		})
	}
	wg.Wait()
	run := OpRun{VUs: vus, Seconds: time.Since(start).Seconds()}
	var lat []float64
	for _, t := range tallies {
		run.OK, run.Refused, run.Failed = run.OK+t.ok, run.Refused+t.refused, run.Failed+t.failed
		run.FailedBy = addCounts(run.FailedBy, t.failedBy)
		lat = append(lat, t.lat...)
		run.Done = append(run.Done, t.done...)
	}
	slices.Sort(lat)
	slices.Sort(run.Done)
	run.PerSec = float64(run.OK) / max(run.Seconds, 1e-9)
	run.P50, run.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	return run
}

// quantile of sorted values, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(math.Ceil(q*float64(len(sorted))))-1)]
}

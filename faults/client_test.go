//go:build faults

package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/internal/testenv"
	"github.com/stockguard/stockguard/pkg/client"
)

// The Go client (pkg/client) under the suite's PostgreSQL primary failover and
// a Redis restart: workers place orders and holds only through it, confirm or
// release some holds and leave the rest to expire, while the Patroni primary
// is killed and, once orders are decided again, Redis is killed and started
// empty; the answers of some calls are lost at the balancer all along
// (clientLoseEvery). Every logical operation carries an Idempotency-Key the test chose,
// and the same string as its customer, which the database keeps with the
// order or hold: so the test finds each operation again in the database,
// whatever key the client sent. After the faults, every call that returned
// *client.OutcomeUnknownError is sent again with its key, as a caller would,
// until it is decided. Then, read from the database: each operation that was
// answered is there exactly once with its units, none answered "nothing was
// done" is there, no operation is there twice, and I1-I7 hold (checkHolds);
// every error a worker got was an outcome-unknown or a documented problem that
// fits its call.

// The client test's settings.
const (
	clientWorkers = 6
	// clientHoldTTL is the holds' ttl: long enough that most confirms and
	// releases come first, short enough that the ones left expire during the
	// run, and that some confirms sent during the outage meet an expired hold.
	clientHoldTTL = 3 * time.Second
	// clientCallBound bounds one call, all its attempts, from the worker's
	// side: past the patient policy's MaxElapsed and an attempt's timeout.
	clientCallBound = 2 * time.Minute
	// clientSettleRounds bounds how often an outcome-unknown call is sent
	// again after the faults.
	clientSettleRounds = 5
)

// patientRetry is the retry policy of half the workers: MaxElapsed past the
// Patroni failover's outage (its ttl of 10s, then 5 to 12s until a
// synchronous standby streams from the new leader, up to about 25s on a
// loaded machine: FAULTS.md), so that a call begun as the primary dies is
// decided by its own retries. The other half keep DefaultRetryPolicy (6
// attempts within 30s), which gives up within the outage: their calls show
// what a caller sees when the retries run out (a *client.RetryError of a
// problem that did nothing, or a *client.OutcomeUnknownError to settle).
var patientRetry = client.RetryPolicy{MaxAttempts: 40, MaxElapsed: 60 * time.Second, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}

// clientOp is one logical operation of a worker: an order, or a hold and
// what became of it.
type clientOp struct {
	ref    string         // its Idempotency-Key and its customer
	hold   bool           // a hold, else a plain order
	units  map[string]int // what it asked for, by SKU
	client int            // 0: the default policy's client, 1: the patient one

	// The call's state: "done" (answered 201), "refused" (an answer that
	// says nothing was done), "unknown" (an *client.OutcomeUnknownError, to
	// settle).
	state    string
	id       string    // the order's or hold's id, when done
	expires  time.Time // a hold's
	problem  string    // the problem's name, when refused
	settled  string    // "replayed" or "anew", for one settled after the faults
	unknowns int       // outcome-unknown errors it returned (the call and its settling)

	// A hold's end: "confirm", "release" or "" (left to expire).
	end        string
	endState   string // as state
	endOrder   string // the confirm's order
	endProblem string
	endSettled string
}

// clientRun is the workers' record, and the attempts' counts.
type clientRun struct {
	mu   sync.Mutex
	ops  []*clientOp
	bad  []string       // errors that say nothing documented
	errs map[string]int // errors returned to the workers, by kind
	// calls is how many calls the workers and the settling made; the
	// transport counts their attempts.
	calls int

	docs    map[string]bool
	clients [2]*client.Client // DefaultRetryPolicy's, patientRetry's
	counter *attemptCounter
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func (cr *clientRun) badf(format string, args ...any) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	cr.bad = append(cr.bad, fmt.Sprintf(format, args...))
}

// attemptCounter is the clients' transport: it counts each attempt by its
// answer's status and problem name, or its transport error.
type attemptCounter struct {
	base http.RoundTripper
	mu   sync.Mutex
	by   map[string]int // "503 dependency-unavailable", "201", "transport: ..."
	n    int
	// lose is, by Idempotency-Key, how many more attempts of that key the
	// balancer is to forward and then drop, its answer lost (loseHeader).
	lose map[string]int
	lost int // attempts whose answers it had lost
}

// loseFirst makes the first n attempts of key lose their answers.
func (a *attemptCounter) loseFirst(key string, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lose[key] = n
}

func (a *attemptCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Idempotency-Key")
	a.mu.Lock()
	lose := key != "" && a.lose[key] > 0
	if lose {
		a.lose[key]--
		a.lost++
	}
	a.mu.Unlock()
	if lose {
		req = req.Clone(req.Context())
		req.Header.Set(loseHeader, "1")
	}
	resp, err := a.base.RoundTrip(req)
	what := ""
	switch {
	case lose && err != nil:
		what = "answer lost by the balancer"
	case err != nil:
		what = "transport: " + transportKind(err)
	default:
		what = fmt.Sprint(resp.StatusCode)
		if resp.StatusCode >= 300 {
			// Read the answer to name its problem, and give it back whole
			// (with the error of a cut read, if any).
			data, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var body io.Reader = bytes.NewReader(data)
			if rerr != nil {
				body = io.MultiReader(body, errorReader{rerr})
				what += " (cut)"
			}
			resp.Body = io.NopCloser(body)
			if i := bytes.Index(data, []byte("problems.md#")); i >= 0 {
				name := data[i+len("problems.md#"):]
				if j := bytes.IndexByte(name, '"'); j >= 0 {
					what += " " + string(name[:j])
				}
			} else {
				what += " " + client.ProblemAboutBlank
			}
		}
	}
	a.mu.Lock()
	a.by[what]++
	a.n++
	a.mu.Unlock()
	return resp, err
}

type errorReader struct{ err error }

func (e errorReader) Read([]byte) (int, error) { return 0, e.err }

// transportKind names a transport error without its addresses.
func transportKind(err error) string {
	s := err.Error()
	for _, k := range []string{"connection reset", "EOF", "connection refused", "Client.Timeout", "broken pipe", "context deadline exceeded"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

func (a *attemptCounter) counts() (attempts, lost int, by map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n, a.lost, copyCounts(a.by)
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// documentedProblems are the sections of docs/problems.md.
func documentedProblems(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/problems.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for l := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(l), "## "); ok {
			out[name] = true
		}
	}
	if !out[client.ProblemInsufficientStock] || !out[client.ProblemOutcomeUnknown] {
		t.Fatalf("docs/problems.md: no insufficient-stock or outcome-unknown section in %v", out)
	}
	return out
}

// fits are the refusals each call may get besides the 503s that did nothing.
var fits = map[string][]string{
	"placeOrder":  {client.ProblemInsufficientStock},
	"placeHold":   {client.ProblemInsufficientStock},
	"confirmHold": {client.ProblemReservationExpired},
	"releaseHold": {client.ProblemReservationExpired},
}

// nothingDoneProblems are the 503s that say nothing was done
// (docs/problems.md), which the client retries and returns, once its retries
// run out, in a *client.RetryError.
var nothingDoneProblems = []string{client.ProblemBusy, client.ProblemOverloaded, client.ProblemDependencyUnavailable,
	client.ProblemLeaseLost, client.ProblemStaleFence, client.ProblemTimeout, client.ProblemUnavailable}

// classify says what an error returned by op means: "unknown" (an
// *client.OutcomeUnknownError carrying key) or "refused" (a documented problem
// that fits op and says nothing was done), with the problem's name; anything
// else is recorded as bad.
func (cr *clientRun) classify(op, key string, err error) (state, name string) {
	var ou *client.OutcomeUnknownError
	var p *client.Problem
	kind := ""
	defer func() {
		cr.mu.Lock()
		cr.errs[kind]++
		cr.mu.Unlock()
	}()
	switch {
	case errors.As(err, &ou):
		kind = "outcome-unknown"
		if ou.IdempotencyKey != key || ou.Op != op {
			cr.badf("%s %s: an outcome-unknown error of another call: %v", op, key, err)
		}
		return "unknown", ""
	case errors.As(err, &p):
		name = p.Name()
		kind = name
		var re *client.RetryError
		if errors.As(err, &re) {
			kind = "retries ran out: " + name
		}
		switch {
		case !cr.docs[name] || !strings.HasSuffix(p.Type, "problems.md#"+name):
			cr.badf("%s %s: a problem of a type docs/problems.md does not document (%q): %v", op, key, p.Type, err)
		case slices.Contains(fits[op], name), slices.Contains(nothingDoneProblems, name):
			return "refused", name
		default:
			cr.badf("%s %s: a problem that does not fit the call: %v", op, key, err)
		}
		return "bad", name
	default:
		kind = "bare error"
		cr.badf("%s %s: an error that is neither a problem nor an outcome unknown: %T %v", op, key, err, err)
		return "bad", ""
	}
}

// TestClientUnderFailover: see the comment at the top of the file.
func TestClientUnderFailover(t *testing.T) {
	r := &result{Fault: "client-failover lock-batch"}
	record(t, r)
	r.Strategy = "lock-batch"
	began := time.Now()
	docs := documentedProblems(t)
	ready(t)
	if missing := testenv.PatroniMissing(); missing != "" {
		if testenv.RequireReal() {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	c := newCluster(t, clusterOptions{replicas: 3, patroni: testenv.StartPatroni(t), strategy: "lock-batch",
		env: []string{"STOCKGUARD_SWEEP_INTERVAL=" + sweepInterval.String()}})
	// The first SKU has more than the run sells: the faults are aimed at its
	// writers, and its orders measure the recoveries. The others run out.
	stocks := []int{100000, 20, 60, 200}
	var skus []string
	for i, n := range stocks {
		skus = append(skus, c.stockSKUs(fmt.Sprintf("cf%d", i), 1, n)[0])
	}
	c.hot = skus[0]
	c.lb.mu.Lock()
	c.lb.hot = c.hot
	c.lb.mu.Unlock()
	setup := time.Since(began)

	workersFrom := time.Now()
	cr := c.startClientWorkers(docs, skus)
	// The waits between faults are counted in orders of the first SKU (a
	// fifth of the operations, about 2 a second here): enough that the
	// faults land under traffic, few, since CI's time is short.
	waitFor(t, time.Minute, "20 orders of the first SKU decided before the faults", func() bool { return c.lb.decisionCount(anyReplica) >= 20 })
	// The primary killed; the old one is left down (the two others are a
	// leader and a synchronous standby): its rejoining is another test's.
	warm := time.Now()
	pk := c.killPrimary()
	pk.out.to = c.sweptAfterNow()
	pk.swept = pk.out.to.Sub(pk.out.from)
	t.Log(pk)
	r.recovered(pk.recovery)
	since := c.lb.decisionCount(anyReplica)
	waitFor(t, time.Minute, "10 orders decided after the failover", func() bool { return c.lb.decisionCount(anyReplica) >= since+10 })
	redisFrom := time.Now()
	killed := redisFrom.Sub(warm)
	rf := c.restartRedis()
	redisOut := outage{from: redisFrom, to: c.sweptAfterNow()}
	r.recovered(rf.recovery)
	redisDetail := fmt.Sprintf("Redis restarted empty while %s was inside its write (loss noticed: %v), first decision %dms after, a hold expired %dms after",
		rf.x, rf.noticed, rf.recovery.Milliseconds(), redisOut.to.Sub(redisOut.from).Milliseconds())
	t.Log(redisDetail)
	since = c.lb.decisionCount(anyReplica)
	waitFor(t, time.Minute, "10 orders decided after the Redis restart", func() bool { return c.lb.decisionCount(anyReplica) >= since+10 })
	drainFrom := time.Now()
	redisTook := drainFrom.Sub(redisFrom)
	cr.stopAndWait()
	drained := time.Since(drainFrom)

	settleFrom := time.Now()
	cr.settle()
	settleTook := time.Since(settleFrom)

	checkFrom := time.Now()
	fig := c.checkClientOps(cr)
	hf := c.checkHolds(r, cr.book(), skus, pk.out, redisOut)
	checkTook := time.Since(checkFrom)
	bad := cr.figures(fig)
	fig.Confirmed, fig.Released, fig.Expired = hf.Confirmed, hf.Released, hf.Expired
	fig.Promotion, fig.KillRecovery, fig.RedisRecovery = pk.promotedAfter.Milliseconds(), pk.recovery.Milliseconds(), rf.recovery.Milliseconds()
	r.Client = fig
	r.Unsettled = int64(fig.Unsettled)
	r.LostAcked += fig.Lost

	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%d errors returned to the workers say nothing documented: %s", len(bad), strings.Join(bad[:min(10, len(bad))], "; "))
	}
	if fig.Unsettled > 0 {
		t.Errorf("%d outcome-unknown calls still undecided after %d rounds of retries with their keys", fig.Unsettled, clientSettleRounds)
	}
	if fig.LostAnswers == 0 || fig.UnknownErrors == 0 {
		t.Errorf("the settling was not exercised (%d answers lost, %d outcome-unknown errors)", fig.LostAnswers, fig.UnknownErrors)
	}
	if fig.Refused[client.ProblemInsufficientStock] == 0 {
		t.Error("no order or hold was refused for want of stock: the SKUs did not run out")
	}
	if fig.OrdersPlaced == 0 || fig.HoldsPlaced == 0 || fig.Confirmed == 0 || fig.Released == 0 || fig.Expired == 0 {
		t.Errorf("the run proves little: %s", fig)
	}
	r.Detail = fmt.Sprintf("%s; %s; %s", pk, redisDetail, fig)
	t.Log(fig)
	t.Logf("wall time: setup %s (Patroni, three replicas, stock), traffic before the faults %s, the kill to 10 orders after %s, the Redis restart to 10 orders after %s, the calls under way %s, settling %s, checks %s; all %s",
		setup.Round(100*time.Millisecond), warm.Sub(workersFrom).Round(100*time.Millisecond), killed.Round(100*time.Millisecond),
		redisTook.Round(100*time.Millisecond), drained.Round(100*time.Millisecond), settleTook.Round(100*time.Millisecond), checkTook.Round(100*time.Millisecond),
		time.Since(began).Round(100*time.Millisecond))
}

// clientLoseEvery: one operation in clientLoseEvery has the answers of its
// first DefaultRetryPolicy.MaxAttempts attempts lost (the balancer forwards
// the request and drops the connection after the replica answered, as a
// network cut between caller and balancer would): the default policy's
// client then returns an *client.OutcomeUnknownError for it whatever the
// service did, which the settling must decide, and the patient one is
// answered by an attempt after them. So the settling is exercised in every
// run, not only when a kill happens to fall between a COMMIT and its answer.
const clientLoseEvery = 10

// startClientWorkers starts the workers: each places orders and holds (six
// in ten) of one to three units of one SKU, or of two SKUs in one in four,
// the first SKU in four lines in ten; of the holds, four in ten are
// confirmed, three released and the rest left to expire. Half the workers
// use DefaultRetryPolicy, half patientRetry. Every call goes through one
// transport that counts its attempts (and loses some answers).
func (c *cluster) startClientWorkers(docs map[string]bool, skus []string) *clientRun {
	t := c.t
	cr := &clientRun{errs: map[string]int{}, docs: docs,
		counter: &attemptCounter{base: http.DefaultTransport.(*http.Transport).Clone(), by: map[string]int{}, lose: map[string]int{}}}
	hc := &http.Client{Transport: cr.counter, Timeout: clientTimeout} // each attempt's bound
	for i, p := range []client.RetryPolicy{client.DefaultRetryPolicy, patientRetry} {
		cl, err := client.New(c.lb.url, client.WithAPIKey(adminToken), client.WithHTTPClient(hc), client.WithRetry(p))
		if err != nil {
			t.Fatal(err)
		}
		cr.clients[i] = cl
	}
	ctx, stop := context.WithCancel(context.Background())
	cr.stop = stop
	t.Cleanup(cr.stopAndWait)
	for w := range clientWorkers {
		cr.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for i := 0; i < 5000 && ctx.Err() == nil; i++ {
				op := &clientOp{ref: fmt.Sprintf("%s-w%d-%d", clientRefs(c), w, i), hold: rng.IntN(10) < 6, units: map[string]int{}, client: w % 2}
				pick := func() string {
					if rng.IntN(10) < 4 {
						return skus[0]
					}
					return skus[1+rng.IntN(len(skus)-1)]
				}
				op.units[pick()] = 1 + rng.IntN(3)
				if rng.IntN(4) == 0 { // an order of a sold-out SKU and another is refused whole
					op.units[pick()] += 1 + rng.IntN(2)
				}
				if op.hold {
					switch n := rng.IntN(10); {
					case n < 4:
						op.end = "confirm"
					case n < 7:
						op.end = "release"
					}
				}
				if i%clientLoseEvery == clientLoseEvery/2 { // by count, not by chance: every run has some
					n := client.DefaultRetryPolicy.MaxAttempts
					cr.counter.loseFirst(op.ref, n)
					cr.counter.loseFirst(op.ref+"-c", n)
					cr.counter.loseFirst(op.ref+"-r", n)
				}
				cr.mu.Lock()
				cr.ops = append(cr.ops, op)
				cr.mu.Unlock()
				cr.run(cr.clients[op.client], op, false)
				if op.hold && op.state == "done" && op.end != "" {
					hold(time.Duration(rng.Int64N(int64(300 * time.Millisecond)))) // the shopper's time to pay or give up
					cr.runEnd(cr.clients[op.client], op, false)
				}
				select { // the workers' own pace
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	return cr
}

// stopAndWait stops the workers and waits for their calls under way (each
// ends within clientCallBound).
func (cr *clientRun) stopAndWait() {
	cr.stop()
	cr.wg.Wait()
}

// settle sends every call that returned an *client.OutcomeUnknownError again,
// with its key and body, by the patient client, until it is decided or
// clientSettleRounds calls have been sent: what a caller does after the
// faults.
func (cr *clientRun) settle() {
	for _, op := range cr.ops {
		for round := 0; op.state == "unknown" && round < clientSettleRounds; round++ {
			cr.run(cr.clients[1], op, true)
		}
		for round := 0; op.endState == "unknown" && round < clientSettleRounds; round++ {
			cr.runEnd(cr.clients[1], op, true)
		}
	}
}

// book is what the workers were answered, as the holds' checks read it.
func (cr *clientRun) book() *holdBook {
	book := newHoldBook()
	for _, op := range cr.ops {
		switch {
		case op.state != "done":
		case !op.hold:
			book.orders = append(book.orders, op.id)
		default:
			h := &heldAs{id: op.id, expires: op.expires, units: op.units}
			switch {
			case op.end == "confirm" && op.endState == "done":
				h.orders = append(h.orders, op.endOrder)
			case op.end == "confirm" && op.endProblem == client.ProblemReservationExpired:
				h.gone++
			case op.end == "release" && op.endState == "done":
				h.freed = true
			}
			book.holds[op.id] = h
		}
	}
	return book
}

// figures fills f's counts of calls and attempts, and returns the errors
// that said nothing documented.
func (cr *clientRun) figures(f *clientFigures) []string {
	f.Attempts, f.LostAnswers, f.AttemptsBy = cr.counter.counts()
	cr.mu.Lock()
	defer cr.mu.Unlock()
	f.Calls, f.Errors = cr.calls, copyCounts(cr.errs)
	f.Retries = f.Attempts - f.Calls
	for k, n := range f.AttemptsBy {
		if strings.HasPrefix(k, "503 outcome-unknown") || strings.HasPrefix(k, "transport:") || strings.HasPrefix(k, "502") || strings.HasPrefix(k, "504") {
			f.UnknownAnswers += n
		}
	}
	f.UnknownAnswers += f.LostAnswers
	return slices.Clone(cr.bad)
}

// run makes op's order or hold; settling, it is sent again with its key and
// body after an outcome-unknown.
func (cr *clientRun) run(cl *client.Client, op *clientOp, settling bool) {
	ctx, cancel := context.WithTimeout(context.Background(), clientCallBound)
	defer cancel()
	cr.mu.Lock()
	cr.calls++
	cr.mu.Unlock()
	var items []client.Item
	for sku, q := range op.units {
		items = append(items, client.Item{SKU: sku, Quantity: q})
	}
	var resp client.Response
	opts := []client.CallOption{client.IdempotencyKey(op.ref), client.Capture(&resp)}
	name := "placeOrder"
	var id string
	var expires time.Time
	var err error
	if op.hold {
		name = "placeHold"
		var h *client.Hold
		if h, err = cl.PlaceHold(ctx, client.HoldRequest{Items: items, TTL: clientHoldTTL.String(), Customer: op.ref}, opts...); err == nil {
			id, expires = h.ID, h.ExpiresAt
		}
	} else {
		var o *client.Order
		if o, err = cl.PlaceOrder(ctx, client.OrderRequest{Items: items, Customer: op.ref}, opts...); err == nil {
			id = o.ID
		}
	}
	state, problem := "done", ""
	if err != nil {
		state, problem = cr.classify(name, op.ref, err)
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	op.state, op.id, op.expires, op.problem = state, id, expires, problem
	if state == "unknown" {
		op.unknowns++
	}
	if settling && state != "unknown" {
		op.settled = map[bool]string{true: "replayed", false: "anew"}[resp.Replayed]
	}
}

// runEnd confirms or releases op's hold, with its own key.
func (cr *clientRun) runEnd(cl *client.Client, op *clientOp, settling bool) {
	ctx, cancel := context.WithTimeout(context.Background(), clientCallBound)
	defer cancel()
	cr.mu.Lock()
	cr.calls++
	cr.mu.Unlock()
	var resp client.Response
	var err error
	var order string
	name := "releaseHold"
	if op.end == "confirm" {
		name = "confirmHold"
		var o *client.Order
		if o, err = cl.ConfirmHold(ctx, op.id, client.ConfirmRequest{}, client.IdempotencyKey(op.ref+"-c"), client.Capture(&resp)); err == nil {
			order = o.ID
			if o.ReservationID != op.id {
				cr.badf("confirmHold %s: the order %s names hold %q", op.id, o.ID, o.ReservationID)
			}
		}
	} else {
		_, err = cl.ReleaseHold(ctx, op.id, client.IdempotencyKey(op.ref+"-r"), client.Capture(&resp))
	}
	state, problem := "done", ""
	if err != nil {
		state, problem = cr.classify(name, op.ref+"-"+op.end[:1], err)
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	op.endState, op.endOrder, op.endProblem = state, order, problem
	if state == "unknown" {
		op.unknowns++
	}
	if settling && state != "unknown" {
		op.endSettled = map[bool]string{true: "replayed", false: "anew"}[resp.Replayed]
	}
}

// clientFigures is what the client test's workers did and met.
type clientFigures struct {
	Ops            int            `json:"operations"`
	OrdersPlaced   int            `json:"orders_placed"`
	HoldsPlaced    int            `json:"holds_placed"`
	Refused        map[string]int `json:"refused"` // orders and holds answered a problem that did nothing, by name
	Confirmed      int            `json:"confirmed"`
	Released       int            `json:"released"`
	Expired        int            `json:"expired"`
	Calls          int            `json:"calls"`
	Attempts       int            `json:"attempts"`
	Retries        int            `json:"retries"`
	AttemptsBy     map[string]int `json:"attempts_by_answer"`
	Errors         map[string]int `json:"errors_returned"`         // by kind
	UnknownAnswers int            `json:"outcome_unknown_answers"` // 503 outcome-unknown, 502, 504 and lost answers
	LostAnswers    int            `json:"answers_lost"`            // by the balancer, on the test's request
	UnknownErrors  int            `json:"outcome_unknown_errors"`
	Replayed       int            `json:"settled_replayed"`
	Anew           int            `json:"settled_anew"`
	Unsettled      int            `json:"unsettled"`
	Duplicates     int            `json:"duplicates"`
	Lost           int            `json:"lost"`
	Promotion      int64          `json:"promotion_ms"`
	KillRecovery   int64          `json:"kill_recovery_ms"`
	RedisRecovery  int64          `json:"redis_recovery_ms"`
}

func (f *clientFigures) String() string {
	keys := func(m map[string]int) string {
		var parts []string
		for k, v := range m {
			parts = append(parts, fmt.Sprintf("%s:%d", k, v))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprintf("client: %d operations, %d orders and %d holds placed, refused %s, %d confirmed, %d released, %d expired; %d calls, %d attempts (%d retries), attempts by answer %s; errors returned %s; %d outcome-unknown answers seen, %d outcome-unknown errors returned, settled %d replayed, %d anew, %d unsettled; %d duplicates, %d lost; promotion %dms, first decision %dms after the kill, %dms after the Redis restart",
		f.Ops, f.OrdersPlaced, f.HoldsPlaced, keys(f.Refused), f.Confirmed, f.Released, f.Expired, f.Calls, f.Attempts, f.Retries, keys(f.AttemptsBy),
		keys(f.Errors), f.UnknownAnswers, f.UnknownErrors, f.Replayed, f.Anew, f.Unsettled, f.Duplicates, f.Lost, f.Promotion, f.KillRecovery, f.RedisRecovery)
}

// checkClientOps checks the workers' operations in the database, found by
// their customer: each answered one there once with its units (and its key's
// record naming it), none refused there, none there twice; each confirm or
// release answered done is what the hold became, each refused is not.
func (c *cluster) checkClientOps(cr *clientRun) *clientFigures {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := &clientFigures{Refused: map[string]int{}}
	type found struct {
		ids   []string
		units map[string]map[string]int // id -> sku -> quantity
	}
	read := func(q string) map[string]*found {
		rows, err := c.db.QueryContext(ctx, q, clientRefs(c)+"-%")
		if err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
		defer func() { _ = rows.Close() }()
		out := map[string]*found{}
		for rows.Next() {
			var ref, id, sku string
			var qty int
			if err := rows.Scan(&ref, &id, &sku, &qty); err != nil {
				t.Fatal(err)
			}
			fo := out[ref]
			if fo == nil {
				fo = &found{units: map[string]map[string]int{}}
				out[ref] = fo
			}
			if fo.units[id] == nil {
				fo.ids = append(fo.ids, id)
				fo.units[id] = map[string]int{}
			}
			fo.units[id][sku] += qty
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	orders := read(`SELECT o.customer, o.id, l.sku, l.quantity FROM orders o JOIN order_lines l ON l.order_id = o.id
		WHERE o.reservation_id IS NULL AND o.customer LIKE $1`)
	holds := read(`SELECT r.customer, r.id, l.sku, l.quantity FROM reservations r JOIN reservation_lines l ON l.reservation_id = r.id
		WHERE r.customer LIKE $1`)
	type holdRow struct{ status, order string }
	holdRows := map[string]holdRow{}
	rows, err := c.db.QueryContext(ctx, "SELECT id, status, COALESCE(order_id, '') FROM reservations WHERE customer LIKE $1", clientRefs(c)+"-%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var h holdRow
		if err := rows.Scan(&id, &h.status, &h.order); err != nil {
			t.Fatal(err)
		}
		holdRows[id] = h
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	records := map[string]string{} // key -> the order or hold its record names
	rows, err = c.db.QueryContext(ctx, "SELECT idem_key, COALESCE(order_id, reservation_id, '') FROM idempotency_records WHERE idem_key LIKE $1", clientRefs(c)+"-%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, id string
		if err := rows.Scan(&k, &id); err != nil {
			t.Fatal(err)
		}
		records[k] = id
	}
	_ = rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	cr.mu.Lock()
	defer cr.mu.Unlock()
	var dups, lost, wrong []string
	refs := map[string]bool{}
	for _, op := range cr.ops {
		refs[op.ref] = true
		f.Ops++
		if op.unknowns > 0 {
			f.UnknownErrors += op.unknowns
		}
		for _, s := range []string{op.settled, op.endSettled} {
			switch s {
			case "replayed":
				f.Replayed++
			case "anew":
				f.Anew++
			}
		}
		in := orders
		if op.hold {
			in = holds
		}
		fo := in[op.ref]
		n := 0
		if fo != nil {
			n = len(fo.ids)
		}
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s: %d %s", op.ref, n, map[bool]string{true: "holds", false: "orders"}[op.hold]))
		}
		switch op.state {
		case "done":
			if op.hold {
				f.HoldsPlaced++
			} else {
				f.OrdersPlaced++
			}
			switch {
			case n == 0:
				lost = append(lost, fmt.Sprintf("%s: answered %s, not in the database", op.ref, op.id))
			case !slices.Contains(fo.ids, op.id):
				wrong = append(wrong, fmt.Sprintf("%s: answered %s, the database has %v", op.ref, op.id, fo.ids))
			case !equalUnits(fo.units[op.id], op.units):
				wrong = append(wrong, fmt.Sprintf("%s: asked %v, the database has %v", op.ref, op.units, fo.units[op.id]))
			case records[op.ref] != op.id:
				wrong = append(wrong, fmt.Sprintf("%s: answered %s, its key's record names %q", op.ref, op.id, records[op.ref]))
			}
		case "refused":
			f.Refused[op.problem]++
			if n > 0 {
				wrong = append(wrong, fmt.Sprintf("%s: answered %s (nothing done), the database has %v", op.ref, op.problem, fo.ids))
			}
		case "unknown":
			f.Unsettled++
		}
		if !op.hold || op.state != "done" || op.end == "" {
			continue
		}
		h := holdRows[op.id]
		switch {
		case op.endState == "unknown":
			f.Unsettled++
		case op.endState == "done" && op.end == "confirm" && (h.status != "confirmed" || h.order != op.endOrder):
			wrong = append(wrong, fmt.Sprintf("%s: confirmed into %s, the database says %s into %q", op.ref, op.endOrder, h.status, h.order))
		case op.endState == "done" && op.end == "release" && h.status != "released":
			wrong = append(wrong, fmt.Sprintf("%s: released, the database says %s", op.ref, h.status))
		case op.endState == "refused" && op.end == "confirm" && h.status == "confirmed",
			op.endState == "refused" && op.end == "release" && h.status == "released":
			wrong = append(wrong, fmt.Sprintf("%s: its %s answered %s (nothing done), the database says %s", op.ref, op.end, op.endProblem, h.status))
		}
	}
	for ref, fo := range orders {
		if !refs[ref] {
			wrong = append(wrong, fmt.Sprintf("orders %v of customer %s, which no worker asked for", fo.ids, ref))
		}
	}
	for ref, fo := range holds {
		if !refs[ref] {
			wrong = append(wrong, fmt.Sprintf("holds %v of customer %s, which no worker asked for", fo.ids, ref))
		}
	}
	f.Duplicates, f.Lost = len(dups), len(lost)
	for what, l := range map[string][]string{"duplicated (one logical operation, more than one row)": dups, "lost (answered, not in the database)": lost,
		"whose answer and database disagree": wrong} {
		if len(l) > 0 {
			sort.Strings(l)
			t.Errorf("%d operations %s: %s", len(l), what, strings.Join(l[:min(5, len(l))], "; "))
		}
	}
	return f
}

// clientRefs starts the refs (keys and customers) of the client test's
// operations: apart from the holds stream's keys (c.id-w<n>-<i>), so that the
// workers can run beside it.
func clientRefs(c *cluster) string { return c.id + "-client" }

func equalUnits(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// sweptAfterNow waits (at most a minute) for the sweeper to expire a hold
// after now, and returns when it was seen to. A fault's outage, for I6, lasts
// until then: a hold due in it is judged from the sweeper's return, which may
// come after the orders' (a TestPostgresPrimaryFailover run here swept three
// holds due just after the orders' recovery 4.5 to 5.6s late, and failed).
// The sweeper's timeliness across a failover is that test's to measure; this
// one's is what the client's callers were answered.
func (c *cluster) sweptAfterNow() time.Time {
	before := c.total(mHolds, expiredEvent)
	waitFor(c.t, time.Minute, "the sweeper expiring a hold after the fault", func() bool { return c.total(mHolds, expiredEvent) > before })
	return time.Now()
}

// primaryKill is what killing the Patroni primary did.
type primaryKill struct {
	old, promoted           string
	promotedAfter, recovery time.Duration
	swept                   time.Duration // from the kill to a hold expired after the recovery
	out                     outage
}

func (k primaryKill) String() string {
	return fmt.Sprintf("primary %s killed; Patroni named %s leader %dms after; first decision %dms after; a hold expired %dms after",
		k.old, k.promoted, k.promotedAfter.Milliseconds(), k.recovery.Milliseconds(), k.swept.Milliseconds())
}

// killPrimary is failPrimary's kill, lighter: SIGKILL of the primary, then
// the wait for a new leader and for the first order decided on a request sent
// after the kill. The old primary is not started again: the two others
// (leader and synchronous standby) carry on, and its rejoining is
// TestPostgresPrimaryFailover's to check.
func (c *cluster) killPrimary() primaryKill {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	old, err := c.patroni.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	old.Kill()
	t0 := time.Now()
	promoted, err := c.patroni.WaitPromoted(ctx, old.Name)
	if err != nil {
		t.Fatal(err)
	}
	k := primaryKill{old: old.Name, promoted: promoted.Name, promotedAfter: time.Since(t0)}
	if k.promotedAfter > patroniPromotionBound {
		t.Errorf("Patroni took %s to name a new leader (bound %s)", k.promotedAfter, patroniPromotionBound)
	}
	k.recovery = c.firstDecisionAfter(t0, patroniRecoveryWait)
	k.out = outage{from: begun, to: t0.Add(k.recovery)}
	return k
}

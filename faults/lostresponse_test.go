//go:build faults

package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// retrier is a client that loses answers and retries with the same
// Idempotency-Key, on a SKU of its own (the load generator audits its own SKU
// and would count these orders as sold behind its back). Each order's first
// attempt is lost one of three ways, in turn:
//
//   - the answer was sent, and the balancer dropped the connection instead of
//     passing it on (the client lost a response the service did send);
//   - the client gave up 2ms into the request (its connection broke);
//   - two attempts at once, on two replicas (a client that retried too soon).
//
// Then it retries until it gets a definite answer: 201, or 409 for want of stock.
type retrier struct {
	c     *cluster
	sku   string
	stock int

	mu     sync.Mutex
	orders []retried
}

type retried struct {
	key      string
	how      string
	lost     answer   // what the balancer dropped, for "dropped"
	lostOK   bool     // the balancer did record an answer
	early    []answer // definite answers to the first attempts, if any
	final    answer
	replayed bool // the final answer said Idempotent-Replayed
	tries    int
}

var retryWays = []string{"dropped", "abandoned", "doubled"}

func newRetrier(c *cluster, stock int) *retrier {
	p := &retrier{c: c, sku: "idem" + c.id, stock: stock}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := post(ctx, c.lb.url+"/v1/skus/"+p.sku+"/restock", fmt.Sprintf(`{"quantity":%d}`, stock),
		map[string]string{"Authorization": "Bearer " + adminToken})
	if err != nil || (rep.status != http.StatusOK && rep.status != http.StatusCreated) {
		c.t.Fatalf("restock %s: %d %v %s", p.sku, rep.status, err, rep.body)
	}
	return p
}

// run places n orders of one unit, one every interval, until ctx ends. An order
// begun is followed to its answer (for a minute at most) even past ctx's end.
func (p *retrier) run(ctx context.Context, n int, interval time.Duration) {
	for i := range n {
		if ctx.Err() != nil {
			return
		}
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		p.place(octx, i)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval): // the client's own pace
		}
	}
}

func (p *retrier) place(ctx context.Context, i int) {
	o := retried{key: fmt.Sprintf("lost-%s-%d", p.c.id, i), how: retryWays[i%len(retryWays)]}
	body := fmt.Sprintf(`{"items":[{"sku":%q,"quantity":1}]}`, p.sku)
	hdr := map[string]string{"Idempotency-Key": o.key}
	switch o.how {
	case "dropped":
		lose := map[string]string{"Idempotency-Key": o.key, loseHeader: "1"}
		if rep, err := post(ctx, p.c.lb.url+"/v1/orders", body, lose); err == nil {
			p.c.t.Errorf("%s: the balancer passed an answer (%d) it was asked to drop", o.key, rep.status)
		}
		o.lost, o.lostOK = p.c.lb.lostAnswer(o.key)
	case "abandoned":
		actx, cancel := context.WithTimeout(ctx, 2*time.Millisecond)
		_, _ = post(actx, p.c.lb.url+"/v1/orders", body, hdr)
		cancel()
	case "doubled":
		var wg sync.WaitGroup
		answers := make([]answer, 2)
		for j := range answers {
			wg.Go(func() { answers[j] = orderAnswer(post(ctx, p.c.lb.url+"/v1/orders", body, hdr)) })
		}
		wg.Wait()
		for _, a := range answers {
			if definite(a) {
				o.early = append(o.early, a)
			}
		}
	}
	for o.tries = 1; o.tries <= 100; o.tries++ {
		rep, err := post(ctx, p.c.lb.url+"/v1/orders", body, hdr)
		o.final = orderAnswer(rep, err)
		o.replayed = rep.replayed
		if definite(o.final) || ctx.Err() != nil {
			break
		}
		select { // 409 still running, a 503 or no answer: ask again
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.mu.Lock()
	p.orders = append(p.orders, o)
	p.mu.Unlock()
}

func definite(a answer) bool {
	return a.err == nil && (a.status == http.StatusCreated || a.status == http.StatusConflict && a.id == "insufficient-stock")
}

// orderAnswer reads an answer to an order: a 201's order id, or a 409's problem
// type (in id).
func orderAnswer(rep reply, err error) answer {
	a := answer{status: rep.status, err: err}
	if err != nil {
		return a
	}
	var v struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	_ = json.Unmarshal(rep.body, &v)
	switch rep.status {
	case http.StatusCreated:
		a.id = v.ID
	case http.StatusConflict:
		a.id = v.Type[strings.LastIndex(v.Type, "#")+1:]
	}
	return a
}

// check verifies I2 for every order placed: each retry got the answer the lost
// attempt had, and the database holds one order under the key when the answer
// was 201, none when it was 409. It returns a summary line.
func (p *retrier) check(ctx context.Context) string {
	t := p.c.t
	p.mu.Lock()
	defer p.mu.Unlock()
	var created, refused, duplicates, mismatched, undecided, dropped int
	for _, o := range p.orders {
		if o.how == "dropped" && o.lostOK {
			dropped++
		}
		if !definite(o.final) {
			undecided++
			t.Errorf("%s (%s): no definite answer after %d tries: %d %v", o.key, o.how, o.tries, o.final.status, o.final.err)
			continue
		}
		if o.how == "dropped" && o.lostOK && definite(o.lost) {
			if o.lost != o.final {
				mismatched++
				t.Errorf("%s: the lost answer was %d %s, the retry got %d %s", o.key, o.lost.status, o.lost.id, o.final.status, o.final.id)
			} else if o.final.status == http.StatusCreated && !o.replayed {
				t.Errorf("%s: the retry of a placed order was not marked Idempotent-Replayed", o.key)
			}
		}
		for _, a := range o.early {
			if a != o.final {
				mismatched++
				t.Errorf("%s: an attempt got %d %s, the retry %d %s", o.key, a.status, a.id, o.final.status, o.final.id)
			}
		}
		var ids []string // the order the key's record names: one record per key, written with its order
		if err := p.c.gdb.WithContext(ctx).Table("idempotency_records").Where("idem_key = ? AND order_id IS NOT NULL", o.key).
			Pluck("order_id", &ids).Error; err != nil {
			t.Fatal(err)
		}
		switch {
		case len(ids) > 1:
			duplicates++
			t.Errorf("I2: %s: %d orders under one Idempotency-Key: %v", o.key, len(ids), ids)
		case o.final.status == http.StatusCreated && (len(ids) != 1 || ids[0] != o.final.id):
			t.Errorf("I2: %s: answered 201 %s, the database holds %v", o.key, o.final.id, ids)
		case o.final.status == http.StatusConflict && len(ids) != 0:
			t.Errorf("I2: %s: answered 409, the database holds %v", o.key, ids)
		}
		if o.final.status == http.StatusCreated {
			created++
		} else {
			refused++
		}
	}
	if created > p.stock {
		t.Errorf("I1: %d units of %s sold, %d stocked", created, p.sku, p.stock)
	}
	// Every order of the SKU is one a key's record names: a second order made by a
	// retry would have none.
	var all int64
	if err := p.c.gdb.WithContext(ctx).Raw("SELECT COUNT(DISTINCT order_id) FROM order_lines WHERE sku = ?", p.sku).Scan(&all).Error; err != nil {
		t.Fatal(err)
	}
	if all != int64(created) {
		duplicates += int(all) - created
		t.Errorf("I2: %d orders of %s in the database, %d keys answered 201", all, p.sku, created)
	}
	if dropped == 0 && len(p.orders) >= len(retryWays) {
		t.Errorf("no answer was dropped after the service sent it: the fault did not happen")
	}
	return fmt.Sprintf("%d orders whose first answer was lost (%d answers dropped after the service sent them, the rest abandoned or doubled), retried with the same key: %d placed, %d refused for stock, %d duplicates, %d answers that differed, %d undecided",
		len(p.orders), dropped, created, refused, duplicates, mismatched, undecided)
}

// reply is an HTTP answer as the tests read it.
type reply struct {
	status   int
	body     []byte
	replayed bool // Idempotent-Replayed: true
}

func post(ctx context.Context, rawURL, body string, hdr map[string]string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}, err
}

// Clients that lose the answer to an order and retry with the same
// Idempotency-Key, during the load: one order, not two, and the same answer
// (I2).
func TestLostResponseRetried(t *testing.T) {
	r := &result{Fault: "lost-response"}
	record(t, r)
	c := newCluster(t, clusterOptions{replicas: 3})
	load := c.startLoad(faultLoadCap, loadVUs)
	load.waitTraffic(100)

	// 60 orders of one unit for 40 units: the last ones are refused, and their
	// retries must replay the refusal.
	p := newRetrier(c, 40)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := w; i < 60; i += 3 {
				p.place(ctx, i)
			}
		})
	}
	wg.Wait()

	c.verify(r, load.finish(afterFault))
	r.Detail = p.check(ctx)
}

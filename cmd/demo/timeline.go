package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/pkg/client"
)

// The page's data: while a round's load runs, the demo samples the hot SKU's
// stock and every replica's /metrics every sampleEvery, and turns the samples
// into series (stock left; the answers per second, all replicas together, by
// kind: sales, refusals, others; each replica's mean latency), over windows of
// rateWindow so that the lines are not mostly noise.

const (
	sampleEvery = 50 * time.Millisecond
	rateWindow  = 250 * time.Millisecond
)

// Routes whose answers the sampler counts: the rounds' orders, the carts' holds.
const (
	ordersRoute = "/v1/orders"
	holdsRoute  = "/v1/reservations"
)

// point is one value at T seconds from the start of the round's sampling.
type point struct{ T, V float64 }

// answerLines are the answers per second, all replicas together: 201 (an
// order placed or a hold granted), 409 (refused: not enough stock) and any
// other status.
type answerLines struct {
	Created, Refused, Other []point
}

// roundSeries is what the page draws of one round.
type roundSeries struct {
	Strategy string
	Result   roundResult
	Left     []point // stocked - sold - reserved: below zero is oversold
	Answers  answerLines
	Latency  [][]point    // per replica, the mean latency of the order requests in ms
	Events   *eventReport // the round's stock events, from the feed
}

// stockLines are a SKU's units over time, for the carts round.
type stockLines struct {
	Available, Held, Sold []point
}

// replicaCounters are a replica's cumulative figures for POST on a route.
type replicaCounters struct {
	ok                      bool
	created, refused, other float64 // answers: 201, 409, any other status
	latSum, count           float64 // seconds, requests
}

type sample struct {
	at        time.Duration
	stock     client.Stock
	haveStock bool // the SKU exists (the load generator creates it in its setup)
	replicas  []replicaCounters
}

// sampler polls one round: its stock through the balancer, and every
// replica's metrics.
type sampler struct {
	shop     *shop // its client and credentials: the stock with the storefront's key, /metrics with the admin token
	balancer string
	replicas []string
	route    string // ordersRoute or holdsRoute
	sku      string
	start    time.Time
	samples  []sample
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for {
		s.samples = append(s.samples, s.sample(ctx))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample reads everything at once, so that one slow replica under load does
// not skew the others' timestamps.
func (s *sampler) sample(ctx context.Context) sample {
	at := time.Since(s.start)
	out := sample{at: at, replicas: make([]replicaCounters, len(s.replicas))}
	var wg sync.WaitGroup
	for i, url := range s.replicas {
		wg.Go(func() { out.replicas[i] = s.scrape(ctx, url) })
	}
	wg.Go(func() {
		store, err := s.shop.clientAt(s.balancer, s.shop.secret(false), once)
		if err != nil {
			return
		}
		if st, err := store.GetSKU(ctx, s.sku); err == nil {
			out.stock, out.haveStock = *st, true
		}
	})
	wg.Wait()
	return out
}

func (s *sampler) scrape(ctx context.Context, url string) replicaCounters {
	replica, err := s.shop.clientAt(url, s.shop.admin, once) // the replicas' /metrics: admin only
	if err != nil {
		return replicaCounters{}
	}
	text, err := replica.Metrics(ctx)
	if err != nil {
		return replicaCounters{}
	}
	c, err := parseMetrics(strings.NewReader(text), s.route)
	if err != nil {
		return replicaCounters{}
	}
	return c
}

// parseMetrics reads the figures of POST route from the Prometheus text
// format: its answers by status, and the latency histogram's sum and count
// (whose route label has no method: the load generator sends no GET
// /v1/orders, the carts round no GET /v1/reservations).
func parseMetrics(r io.Reader, route string) (replicaCounters, error) {
	label := `route="` + route + `"` // the closing quote leaves route/:id out
	var c replicaCounters
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		l := lines.Text()
		if strings.HasPrefix(l, "#") || !strings.Contains(l, label) {
			continue
		}
		name, rest, ok := strings.Cut(l, "{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return replicaCounters{}, fmt.Errorf("metrics line %q: %w", l, err)
		}
		switch name {
		case "stockguard_http_requests_total":
			if !strings.Contains(labels, `method="POST"`) {
				continue
			}
			c.ok = true
			switch {
			case strings.Contains(labels, `status="201"`):
				c.created += v
			case strings.Contains(labels, `status="409"`):
				c.refused += v
			default:
				c.other += v
			}
		case "stockguard_http_request_duration_seconds_sum":
			c.latSum = v
		case "stockguard_http_request_duration_seconds_count":
			c.count = v
		}
	}
	return c, lines.Err()
}

// series turns the samples into what the page draws of a round: the stock
// left, and the answers per second and mean latencies over the last rateWindow
// or more before each sample. An answers point needs every replica's figures
// at both ends of its window (a sum with one missing would look like a dip);
// a latency point needs the replica's own.
func (s *sampler) series(strategy string, r roundResult) roundSeries {
	out := roundSeries{Strategy: strategy, Result: r, Latency: make([][]point, len(s.replicas))}
	// The round starts with its stock on sale: the load generator's setup
	// creates the SKU, and a locked sale of it can end within one sample.
	out.Left = append(out.Left, point{0, r.Audit.Stocked})
	for _, sm := range s.samples {
		if sm.haveStock {
			out.Left = append(out.Left, point{sm.at.Seconds(), float64(sm.stock.Stocked - sm.stock.Sold - sm.stock.Reserved)})
		}
	}
	s.windows(func(t, dt float64, cur, prev sample) {
		all := true
		var sum replicaCounters
		for k, c := range cur.replicas {
			p := prev.replicas[k]
			if !c.ok || !p.ok {
				all = false
				continue
			}
			sum.created += c.created - p.created
			sum.refused += c.refused - p.refused
			sum.other += c.other - p.other
			if n := c.count - p.count; n > 0 {
				out.Latency[k] = append(out.Latency[k], point{t, (c.latSum - p.latSum) / n * 1000})
			}
		}
		if all && len(cur.replicas) > 0 {
			out.Answers.Created = append(out.Answers.Created, point{t, sum.created / dt})
			out.Answers.Refused = append(out.Answers.Refused, point{t, sum.refused / dt})
			out.Answers.Other = append(out.Answers.Other, point{t, sum.other / dt})
		}
	})
	return out
}

// windows calls f for every sample that ends a window of rateWindow or more,
// with the sample that starts it.
func (s *sampler) windows(f func(t, dt float64, cur, prev sample)) {
	j := 0 // the window's first sample
	for i, sm := range s.samples {
		for j+1 < i && sm.at-s.samples[j+1].at >= rateWindow {
			j++
		}
		if i == 0 || sm.at-s.samples[j].at < rateWindow {
			continue
		}
		f(sm.at.Seconds(), (sm.at - s.samples[j].at).Seconds(), sm, s.samples[j])
	}
}

// stockLines are the SKU's units as sampled: available, held (reserved) and sold.
func (s *sampler) stockLines() stockLines {
	var out stockLines
	for _, sm := range s.samples {
		if !sm.haveStock {
			continue
		}
		t := sm.at.Seconds()
		out.Available = append(out.Available, point{t, float64(sm.stock.Available)})
		out.Held = append(out.Held, point{t, float64(sm.stock.Reserved)})
		out.Sold = append(out.Sold, point{t, float64(sm.stock.Sold)})
	}
	return out
}

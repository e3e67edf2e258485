package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The page's data: while a round's load runs, the demo samples the hot SKU's
// stock and every replica's /metrics every sampleEvery, and turns the samples
// into series (stock left, order requests per second and their mean latency per
// replica, over windows of rateWindow so that the lines are not mostly noise).

const (
	sampleEvery = 50 * time.Millisecond
	rateWindow  = 250 * time.Millisecond
)

// point is one value at T seconds from the start of the round's sampling.
type point struct{ T, V float64 }

// roundSeries is what the page draws of one round.
type roundSeries struct {
	Strategy string
	Result   roundResult
	Left     []point   // stocked - sold - reserved: below zero is oversold
	Rate     [][]point // per replica, order requests answered per second
	Latency  [][]point // per replica, their mean latency in ms
}

// replicaCounters are a replica's cumulative figures for POST /v1/orders.
type replicaCounters struct {
	ok            bool
	reqs          float64
	latSum, count float64 // seconds, requests
}

type sample struct {
	at       time.Duration
	left     int64
	haveLeft bool // the SKU exists (the load generator creates it in its setup)
	replicas []replicaCounters
}

// sampler polls one round: its stock through the balancer, and every
// replica's metrics.
type sampler struct {
	client   *http.Client
	balancer string
	replicas []string
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
		var st orders.Stock
		if err := s.getJSON(ctx, s.balancer+"/v1/skus/"+s.sku, &st); err == nil {
			out.left, out.haveLeft = st.Stocked-st.Sold-st.Reserved, true
		}
	})
	wg.Wait()
	return out
}

func (s *sampler) get(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return resp.Body, nil
}

func (s *sampler) getJSON(ctx context.Context, url string, out any) error {
	body, err := s.get(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	return json.NewDecoder(body).Decode(out)
}

func (s *sampler) scrape(ctx context.Context, url string) replicaCounters {
	body, err := s.get(ctx, url+"/metrics")
	if err != nil {
		return replicaCounters{}
	}
	defer func() { _ = body.Close() }()
	c, err := parseOrderMetrics(body)
	if err != nil {
		return replicaCounters{}
	}
	return c
}

// parseOrderMetrics reads the figures of POST /v1/orders from the Prometheus
// text format: the requests of every status, and the latency histogram's sum
// and count (its route label has no method; the load generator sends no GET
// /v1/orders).
func parseOrderMetrics(r io.Reader) (replicaCounters, error) {
	const route = `route="/v1/orders"` // the closing quote leaves /v1/orders/:id out
	var c replicaCounters
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for lines.Scan() {
		l := lines.Text()
		if strings.HasPrefix(l, "#") || !strings.Contains(l, route) {
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
			if strings.Contains(labels, `method="POST"`) {
				c.reqs += v
				c.ok = true
			}
		case "stockguard_http_request_duration_seconds_sum":
			c.latSum = v
		case "stockguard_http_request_duration_seconds_count":
			c.count = v
		}
	}
	return c, lines.Err()
}

// series turns the samples into what the page draws: rates and mean latencies
// over the last rateWindow or more before each sample, where the replica
// answered both.
func (s *sampler) series(strategy string, r roundResult) roundSeries {
	out := roundSeries{Strategy: strategy, Result: r,
		Rate: make([][]point, len(s.replicas)), Latency: make([][]point, len(s.replicas))}
	// The round starts with its stock on sale: the load generator's setup
	// creates the SKU, and a locked sale of it can end within one sample.
	out.Left = append(out.Left, point{0, r.Audit.Stocked})
	j := 0 // the window's first sample
	for i, sm := range s.samples {
		t := sm.at.Seconds()
		if sm.haveLeft {
			out.Left = append(out.Left, point{t, float64(sm.left)})
		}
		for j+1 < i && sm.at-s.samples[j+1].at >= rateWindow {
			j++
		}
		if i == 0 || sm.at-s.samples[j].at < rateWindow {
			continue
		}
		prev := s.samples[j]
		dt := (sm.at - prev.at).Seconds()
		for k, c := range sm.replicas {
			p := prev.replicas[k]
			if !c.ok || !p.ok || dt <= 0 {
				continue
			}
			out.Rate[k] = append(out.Rate[k], point{t, (c.reqs - p.reqs) / dt})
			if n := c.count - p.count; n > 0 {
				out.Latency[k] = append(out.Latency[k], point{t, (c.latSum - p.latSum) / n * 1000})
			}
		}
	}
	return out
}

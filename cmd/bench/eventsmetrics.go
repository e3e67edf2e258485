package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stockguard/stockguard/internal/orders"
)

// The stock events' metrics, as each replica's /metrics gives them.
const (
	lagMetric       = "stockguard_events_delivery_lag_seconds"
	backlogMetric   = "stockguard_events_backlog"
	oldestMetric    = "stockguard_events_backlog_oldest_seconds"
	publishedMetric = "stockguard_events_published_total"
	leadingMetric   = "stockguard_events_relay_leading"
)

// Histogram is a Prometheus histogram's buckets: the finite upper bounds in
// ascending order with the cumulative count of each, and Count, the +Inf
// bucket's (every observation). JSON has no +Inf, hence its own field.
type Histogram struct {
	Bounds []float64 `json:"le"`
	Cum    []float64 `json:"cumulative"`
	Count  float64   `json:"count"`
}

// sub is h's observations since before (the same buckets).
func (h Histogram) sub(before Histogram) Histogram {
	if len(before.Cum) != len(h.Cum) {
		return h
	}
	d := Histogram{Bounds: slices.Clone(h.Bounds), Cum: make([]float64, len(h.Cum)), Count: h.Count - before.Count}
	for i := range h.Cum {
		d.Cum[i] = h.Cum[i] - before.Cum[i]
	}
	return d
}

// add sums two histograms of the same buckets (an empty one takes the other's).
func (h Histogram) add(o Histogram) Histogram {
	if len(h.Bounds) == 0 {
		return Histogram{Bounds: slices.Clone(o.Bounds), Cum: slices.Clone(o.Cum), Count: o.Count}
	}
	if len(o.Cum) != len(h.Cum) {
		return h
	}
	s := Histogram{Bounds: slices.Clone(h.Bounds), Cum: make([]float64, len(h.Cum)), Count: h.Count + o.Count}
	for i := range h.Cum {
		s.Cum[i] = h.Cum[i] + o.Cum[i]
	}
	return s
}

// Quantile is the q-quantile of the observations as Prometheus's
// histogram_quantile computes it: the bucket the rank falls in is found, and
// the value interpolated linearly between its lower bound (0 for the first
// bucket) and its upper bound. A rank in the +Inf bucket gives the highest
// finite bound. NaN when there is no observation.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count <= 0 || len(h.Bounds) == 0 || q < 0 || q > 1 {
		return math.NaN()
	}
	rank := q * h.Count
	i := 0
	for i < len(h.Cum) && h.Cum[i] < rank {
		i++
	}
	if i == len(h.Cum) {
		return h.Bounds[len(h.Bounds)-1]
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Cum[i-1]
	} else if h.Bounds[0] <= 0 {
		return h.Bounds[0]
	}
	in := h.Cum[i] - below
	if in <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/in
}

// eventMetrics is what one replica's /metrics says of the stock events.
type eventMetrics struct {
	lag       Histogram // destination nats
	published float64   // destination nats
	backlog   float64
	oldest    float64
	leading   bool
}

// parseEventMetrics reads the events' metrics from Prometheus's text format.
func parseEventMetrics(r io.Reader) (eventMetrics, error) {
	var m eventMetrics
	type bucket struct{ le, n float64 }
	var buckets []bucket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, err := sampleLine(line)
		if err != nil {
			return m, err
		}
		switch name {
		case lagMetric + "_bucket":
			if labels["destination"] != orders.DestinationNATS {
				continue
			}
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				return m, fmt.Errorf("%s: le %q: %w", name, labels["le"], err)
			}
			if math.IsInf(le, 1) {
				m.lag.Count = value
			} else {
				buckets = append(buckets, bucket{le, value})
			}
		case publishedMetric:
			if labels["destination"] == orders.DestinationNATS {
				m.published = value
			}
		case backlogMetric:
			m.backlog = value
		case oldestMetric:
			m.oldest = value
		case leadingMetric:
			m.leading = value == 1
		}
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("metrics: %w", err)
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	for _, b := range buckets {
		m.lag.Bounds, m.lag.Cum = append(m.lag.Bounds, b.le), append(m.lag.Cum, b.n)
	}
	return m, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sampleLine splits a sample line of the text format: its metric name, its
// labels and its value (a timestamp after it is ignored).
func sampleLine(line string) (name string, labels map[string]string, value float64, err error) {
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		name = line[:i]
		labels = map[string]string{}
		rest = line[i+1:]
		for {
			rest = strings.TrimLeft(rest, " ,")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			k, after, ok := strings.Cut(rest, "=\"")
			if !ok {
				return "", nil, 0, fmt.Errorf("metrics: bad labels in %q", line)
			}
			var v strings.Builder
			j := 0
			for ; j < len(after) && after[j] != '"'; j++ {
				if after[j] == '\\' && j+1 < len(after) {
					j++
					switch after[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(after[j])
					}
					continue
				}
				v.WriteByte(after[j])
			}
			if j == len(after) {
				return "", nil, 0, fmt.Errorf("metrics: unterminated label in %q", line)
			}
			labels[strings.TrimSpace(k)] = v.String()
			rest = after[j+1:]
		}
	} else {
		name, rest, _ = strings.Cut(line, " ")
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, fmt.Errorf("metrics: no value in %q", line)
	}
	value, err = strconv.ParseFloat(f[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("metrics: value in %q: %w", line, err)
	}
	return name, labels, value, nil
}

// scrapeEvents reads the events' metrics of the replica at base, within 2s.
func scrapeEvents(ctx context.Context, base string) (m eventMetrics, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = scrapeMetrics(ctx, base, func(r io.Reader) (err error) {
		m, err = parseEventMetrics(r)
		return err
	})
	return m, err
}

// clusterEvents sums the replicas' readings: the lag histograms and the
// publishes add up; the backlog figures are the leader's (the others report
// 0), so their sum and highest are the leader's too.
func clusterEvents(ctx context.Context, urls []string) (eventMetrics, error) {
	var sum eventMetrics
	for _, u := range urls {
		m, err := scrapeEvents(ctx, u)
		if err != nil {
			return sum, err
		}
		sum.lag = sum.lag.add(m.lag)
		sum.published += m.published
		sum.backlog += m.backlog
		sum.oldest = max(sum.oldest, m.oldest)
		sum.leading = sum.leading || m.leading
	}
	return sum, nil
}

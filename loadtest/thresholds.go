package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Threshold is one pass/fail criterion, as k6 writes them: the metric
// http_req_duration with "p(95)<200ms", http_req_failed with "rate<0.01",
// oversold with "count==0", checks with "rate>0.99".
type Threshold struct {
	Metric string
	Agg    string  // avg, min, max, med, p, rate, count, value
	P      float64 // the percentile, for p
	Op     string  // <, <=, >, >=, ==, !=
	Value  float64 // milliseconds for durations
	Source string
}

var thresholdRe = regexp.MustCompile(`^\s*(avg|min|max|med|rate|count|value|p\(\s*([0-9]+(?:\.[0-9]+)?)\s*\))\s*(<=|>=|==|!=|<|>)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*(us|µs|ms|s|m)?\s*$`)

// ErrThreshold is returned for an expression that cannot be evaluated.
var ErrThreshold = errors.New("bad threshold")

// ParseThreshold reads one expression for metric.
func ParseThreshold(metric, expr string) (Threshold, error) {
	kind, ok := metricKinds[metric]
	if !ok {
		return Threshold{}, fmt.Errorf("%w: unknown metric %q", ErrThreshold, metric)
	}
	m := thresholdRe.FindStringSubmatch(expr)
	if m == nil {
		return Threshold{}, fmt.Errorf("%w: %s: %q is not <aggregation><operator><value>, e.g. p(95)<200ms", ErrThreshold, metric, expr)
	}
	t := Threshold{Metric: metric, Agg: m[1], Op: m[3], Source: expr}
	if strings.HasPrefix(t.Agg, "p(") {
		t.Agg = "p"
		t.P, _ = strconv.ParseFloat(m[2], 64)
		if t.P <= 0 || t.P > 100 {
			return Threshold{}, fmt.Errorf("%w: %s: percentile %v is not in (0, 100]", ErrThreshold, metric, t.P)
		}
	}
	if !kind.allows(t.Agg) {
		return Threshold{}, fmt.Errorf("%w: %s is a %s: %q does not apply (use %s)", ErrThreshold, metric, kind, t.Agg, kind.aggs())
	}
	t.Value, _ = strconv.ParseFloat(m[4], 64)
	switch unit := m[5]; {
	case unit != "" && kind != trend:
		return Threshold{}, fmt.Errorf("%w: %s: a unit only applies to durations", ErrThreshold, metric)
	case unit == "us" || unit == "µs":
		t.Value /= 1000
	case unit == "s":
		t.Value *= 1000
	case unit == "m":
		t.Value *= 60_000
	}
	return t, nil
}

// Evaluate reports whether the threshold holds, and the value it judged.
func (t Threshold) Evaluate(s *Summary) (bool, float64) {
	v := s.value(t.Metric, t.Agg, t.P)
	switch t.Op {
	case "<":
		return v < t.Value, v
	case "<=":
		return v <= t.Value, v
	case ">":
		return v > t.Value, v
	case ">=":
		return v >= t.Value, v
	case "==":
		return v == t.Value, v
	default:
		return v != t.Value, v
	}
}

type metricKind string

const (
	trend   metricKind = "trend"
	rate    metricKind = "rate"
	counter metricKind = "counter"
	gauge   metricKind = "gauge"
)

func (k metricKind) allows(agg string) bool { return strings.Contains(" "+k.aggs()+" ", " "+agg+" ") }

func (k metricKind) aggs() string {
	switch k {
	case trend:
		return "avg min max med p"
	case rate:
		return "rate"
	case counter:
		return "count rate"
	default:
		return "value min max"
	}
}

// metricKinds lists the metrics a threshold can name.
var metricKinds = map[string]metricKind{
	"http_req_duration":  trend,
	"iteration_duration": trend,
	"hold_duration":      trend,
	"confirm_duration":   trend,
	"release_duration":   trend,
	"http_req_failed":    rate,
	"checks":             rate,
	"http_reqs":          counter,
	"iterations":         counter,
	"dropped_iterations": counter,
	"orders_accepted":    counter,
	"orders_refused":     counter,
	"oversold":           counter,
	"holds_placed":       counter,
	"holds_refused":      counter,
	"units_held":         counter,
	"units_confirmed":    counter,
	"units_released":     counter,
	"units_expired":      counter,
	"units_lost":         counter,
	"units_sold_twice":   counter,
	"data_sent":          counter,
	"data_received":      counter,
	"vus":                gauge,
}

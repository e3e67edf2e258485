package redislease_test

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func newClient(tb testing.TB, rdb redis.UniversalClient, ns string, opt *lock.Options) *lock.Client {
	tb.Helper()
	return newClientWith(tb, rdb, redislease.Options{Keys: redislease.Keys{Namespace: ns}}, opt)
}

// newClientWith is newClient with the Redis backend's options (Replicas).
func newClientWith(tb testing.TB, rdb redis.UniversalClient, ro redislease.Options, opt *lock.Options) *lock.Client {
	tb.Helper()
	c, err := redislease.NewClient(rdb, &ro, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// metricValue reads one counter or gauge (or a histogram's count) from m.
func metricValue(tb testing.TB, m *lockprom.Metrics, name string, labels map[string]string) float64 {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range mt.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if !maps.Equal(got, labels) && (len(labels) > 0 || len(got) > 0) {
				continue
			}
			switch {
			case mt.GetCounter() != nil:
				return mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				return mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

package lockprom_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/lockprom"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

func ExampleNew() {
	mr, err := miniredis.Run() // an embedded Redis; use your own server in real code
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()

	metrics := lockprom.New("stockguard")
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	locks, _ := redislease.NewClient(rdb, nil, &lock.Options{Metrics: metrics})
	defer func() { _ = locks.Close() }()

	_ = locks.Do(context.Background(), []string{"A-1"}, func(context.Context, *lock.Grant) error { return nil })
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "stockguard_lock_acquisitions_total" {
			continue
		}
		for _, m := range f.GetMetric() { // every value of the label, at 0 from the start
			fmt.Println(f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
		}
	}
	// Output:
	// stockguard_lock_acquisitions_total handoff 0
	// stockguard_lock_acquisitions_total obtained 1
}

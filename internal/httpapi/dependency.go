package httpapi

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dependencyRecheck is how old a dependency's state may be before a scrape
// asks for a new check.
const dependencyRecheck = time.Second

// newDependencyGauge is stockguard_dependency_up{dependency}: 1 when d last
// answered its check, 0 when it did not. A scrape never waits for the check:
// it reads the last state and, when that is older than dependencyRecheck,
// starts one check in the background (at most one at a time per dependency),
// so that /metrics stays fast while a dependency hangs. Until the first check
// ends the state is up.
func newDependencyGauge(d Dependency) prometheus.Collector {
	var down, checking atomic.Bool
	var checked atomic.Int64 // UnixNano of the last check's end
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "stockguard", Name: "dependency_up",
		Help:        "1 when the dependency answered its last check (as /readyz checks it, at most a second old), else 0.",
		ConstLabels: prometheus.Labels{"dependency": d.Name}}, func() float64 {
		if time.Since(time.Unix(0, checked.Load())) > dependencyRecheck && checking.CompareAndSwap(false, true) {
			go func() {
				defer checking.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				down.Store(d.Check(ctx) != nil)
				checked.Store(time.Now().UnixNano())
			}()
		}
		if down.Load() {
			return 0
		}
		return 1
	})
}

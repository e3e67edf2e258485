package redlock_test

import (
	"testing"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// The Redlock backend passes the conformance suite on three private
// redis-servers. Pause stops two of them (SIGSTOP): no majority can renew.
// Restart restarts all three empty (no persistence): every counter is lost, and
// the tokens still grow because the suite's counters are at the nodes' clocks
// (the hybrid clock covers the loss: see the package documentation for the
// terms).
func TestRedlockConformance(t *testing.T) {
	ns := startNodes(t, 3)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			space := &nodes{servers: ns.servers, keys: redislease.Keys{Namespace: "t" + randomID()}}
			return func(t testing.TB) lock.Backend { return space.open(t) }
		},
		Pause: func(testing.TB) func() {
			ns.servers[0].Pause()
			ns.servers[1].Pause()
			return func() {
				ns.servers[0].Resume()
				ns.servers[1].Resume()
			}
		},
		Restart: func(t testing.TB) {
			for _, s := range ns.servers {
				s.Restart(t)
			}
		},
		TokensSurviveRestart: true,
	})
}

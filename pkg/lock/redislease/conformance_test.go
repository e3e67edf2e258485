package redislease_test

import (
	"testing"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// The Redis backend passes the conformance suite on a private redis-server,
// which the suite pauses and restarts empty (no persistence): its tokens are a
// hybrid clock, so they keep growing across the restart (see the package
// documentation for the terms).
func TestRedisConformance(t *testing.T) {
	srv := startRedisServer(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			env := newRedisAt(t, srv.Addr)
			return func(t testing.TB) lock.Backend {
				b, err := redislease.New(env.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: env.Namespace}})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		},
		Pause: func(testing.TB) func() {
			srv.Pause()
			return srv.Resume
		},
		Restart:              func(t testing.TB) { srv.Restart(t) },
		TokensSurviveRestart: true,
	})
}

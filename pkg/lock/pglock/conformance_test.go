package pglock_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
)

// The PostgreSQL backend passes the conformance suite: each space is a table of
// its own, each open a Backend on a pool of its own. Pause and Restart are left
// out (the shared server is not ours to stop); the tokens are durable rows, so
// they would survive a restart that loses no commit.
func TestPostgresConformance(t *testing.T) {
	var n atomic.Int64
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			s := newSpace(t)
			return func(t testing.TB) lock.Backend {
				return s.open(t, fmt.Sprint("pglock-conf-", n.Add(1)))
			}
		},
		TokensSurviveRestart: true,
	})
}

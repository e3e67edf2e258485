package azlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/locktest"
)

// The Azure blob lease backend passes the conformance suite on a private
// Azurite: each space is a container of its own, each open a Backend with an
// HTTP client of its own. Pause stops Azurite (SIGSTOP); Restart kills it and
// starts it again on its directory. Azurite saves its metadata only every 5s,
// so a kill can lose the last tokens: TokensSurviveRestart is not claimed (on
// Azure Storage, whose writes are durable when acknowledged, it would hold).
func TestConformance(t *testing.T) {
	s := startAzurite(t)
	locktest.Run(t, locktest.Harness{
		Space: func(t testing.TB) func(testing.TB) lock.Backend {
			url := containerURL(t)
			return func(t testing.TB) lock.Backend { return open(t, s, url) }
		},
		Pause: func(testing.TB) func() {
			s.Pause()
			return s.Resume
		},
		Restart: func(t testing.TB) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := s.Restart(ctx); err != nil {
				t.Fatal(err)
			}
		},
	})
}

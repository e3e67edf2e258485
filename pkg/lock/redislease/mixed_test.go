package redislease_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
)

// Single- and multi-resource callers in three processes on one hot resource, as
// orders with several lines are. With leases that expire only after a minute and
// a poll as slow, a ring of waiters (each holding what the next one waits for)
// would stall the test until its deadline instead of finishing.
func TestMixedResourceSetsMakeProgress(t *testing.T) {
	env := newRedis(t)
	const clients, goroutines, rounds = 3, 21, 30
	var cs []*lock.Client
	for range clients {
		cs = append(cs, newClient(t, env.Client(t), env.Namespace,
			&lock.Options{TTL: time.Minute, MaxPoll: time.Minute, MinPoll: time.Minute}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	checks := map[string]*holdCheck{"HOT": {}, "B": {}, "C": {}}
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for g := range clients * goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				names := []string{"HOT"}
				switch rng.IntN(10) {
				case 0, 1:
					names = append(names, []string{"B", "C"}[rng.IntN(2)])
				case 2:
					names = []string{[]string{"B", "C"}[rng.IntN(2)]}
				}
				err := cs[g%clients].Do(ctx, names, func(_ context.Context, gr *lock.Grant) error {
					for _, n := range gr.Names() {
						checks[n].hold(gr.Token(n))
					}
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a caller did not get its grant in time (a ring of waiters?): %v", err)
	}
	for n, h := range checks {
		if h.overlaps.Load() != 0 || h.tokenDrops.Load() != 0 {
			t.Errorf("%s: %d overlaps, %d tokens not above the previous", n, h.overlaps.Load(), h.tokenDrops.Load())
		}
	}
}

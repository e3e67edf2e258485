package redislease_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockguard/stockguard/pkg/lock"
	"github.com/stockguard/stockguard/pkg/lock/redislease"
)

// polling is a Backend that announces nothing (Azure's blob leases do not):
// the Redis backend with its Notifier hidden.
type polling struct{ lock.Backend }

// Two processes on a polling-only Backend, each with many callers of one hot
// resource, both get a fair share of it. Before, the process that gave the
// lease up at MaxHandoffs took it back a millisecond later, before the other
// process's next poll (up to 500ms away) could land: its share was 2-5%.
func TestPollingBackendSharesHotResource(t *testing.T) {
	env := newRedis(t)
	var procs []*lock.Client
	for range 2 {
		b, err := redislease.New(env.Client(t), &redislease.Options{Keys: redislease.Keys{Namespace: env.Namespace}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := lock.NewClient(polling{b}, &lock.Options{TTL: 5 * time.Second, MaxHandoffs: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		procs = append(procs, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const perProc, rounds = 8, 40
	var grants [2]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*perProc)
	for p := range 2 {
		for range perProc {
			wg.Go(func() {
				for range rounds {
					err := procs[p].Do(ctx, []string{"hot"}, func(context.Context, *lock.Grant) error {
						grants[p].Add(1)
						time.Sleep(200 * time.Microsecond) // the work under the lock
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	// Count the shares while both processes still want the resource: the first
	// half of all grants.
	half := int64(perProc * rounds)
	var at [2]int64
	for grants[0].Load()+grants[1].Load() < half {
		select {
		case <-ctx.Done():
			t.Fatal("the grants did not come within a minute")
		case <-time.After(time.Millisecond):
		}
	}
	at[0], at[1] = grants[0].Load(), grants[1].Load()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	least := min(at[0], at[1])
	if share := float64(least) / float64(at[0]+at[1]); share < 0.2 {
		t.Fatalf("while both processes waited, one got %d of %d grants (%.0f%%): the other kept taking the lease back", least, at[0]+at[1], 100*share)
	}
	t.Logf("shares while both waited: %d and %d grants", at[0], at[1])
}

package batch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/stockguard/stockguard/internal/batch"
)

// Reservations of one SKU are batched: whoever arrives while a batch holds the
// SKU's lock is served by the next batch, in one critical section, with its
// own answer.
func Example() {
	var mu sync.Mutex // stands for a distributed lock on the SKU
	stock := 10
	q := batch.New(batch.Config{MaxBatch: 64}, func(ctx context.Context, sku string, take func() []int) ([]bool, error) {
		mu.Lock() // what must come first: the items that queue meanwhile join this batch
		defer mu.Unlock()
		wants := take()
		ok := make([]bool, len(wants))
		for i, n := range wants { // in arrival order, against what those before left
			if n <= stock {
				stock -= n
				ok[i] = true
			}
		}
		return ok, nil
	})

	var wg sync.WaitGroup
	var placed atomic.Int32
	for range 3 {
		wg.Go(func() {
			ok, err := q.Do(context.Background(), "sku-1", 4)
			var shed *batch.ShedError
			switch {
			case errors.As(err, &shed):
				_ = shed.RetryAfter() // a 503 with Retry-After: ErrFull or ErrNoTime
			case err == nil && ok:
				placed.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("placed:", placed.Load(), "stock left:", stock)
	// Output: placed: 2 stock left: 2
}

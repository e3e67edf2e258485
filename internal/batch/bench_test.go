package batch_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stockguard/stockguard/internal/batch"
)

// BenchmarkQueue measures Do's throughput with a lead that does nothing but
// take, from many callers at once on one hot key and on 64 keys.
func BenchmarkQueue(b *testing.B) {
	for _, keys := range []int{1, 64} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			names := make([]string, keys)
			for i := range names {
				names[i] = "sku-" + strconv.Itoa(i)
			}
			var leads atomic.Int64
			q := batch.New(batch.Config{}, func(_ context.Context, _ string, take func() []int) ([]int, error) {
				leads.Add(1)
				return take(), nil
			})
			var next atomic.Int64
			b.SetParallelism(32) // callers per core: a queue forms only with many waiting
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := int(next.Add(1))
					if r, err := q.Do(ctx, names[i%keys], i); err != nil || r != i {
						b.Errorf("Do(%d) = %d, %v", i, r, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/float64(max(leads.Load(), 1)), "items/lead")
		})
	}
}

//go:build !race

// The race detector drops a quarter of what goes back to a sync.Pool, and so
// adds allocations: the count is taken without it.

package httpapi_test

import "testing"

// maxOrderAllocs is the most allocations one order of BenchmarkPlaceOrder
// may make, its request and recorder included: the figure BENCHMARKS.md
// gives under "Allocations per order". Lower both when the count falls.
const maxOrderAllocs = 33

// The HTTP layer's allocations per order stay within what BENCHMARKS.md says.
func TestPlaceOrderAllocs(t *testing.T) {
	h := benchHandler()
	placeOrder(t, h) // the route's metrics and the pools made once
	if n := testing.AllocsPerRun(200, func() { placeOrder(t, h) }); n > maxOrderAllocs {
		t.Errorf("%.0f allocations per order, BENCHMARKS.md says at most %d", n, maxOrderAllocs)
	}
}

package httpapi_test

import "testing"

// maxOrderAllocs is the most allocations one order of BenchmarkPlaceOrder
// may make, its request and recorder included: the figure BENCHMARKS.md
// gives under "Allocations per order". Lower both when the count falls.
const maxOrderAllocs = 33

// raceOrderAllocs is the same bound in a -race build (make test's), which
// counts more: its sync.Pools drop a quarter of what is put back (ours, gin's
// contexts), at random, and a few values escape that do not without it. It
// measured 37; the two above leave room for the drops' chance.
const raceOrderAllocs = 39

// The HTTP layer's allocations per order stay within what BENCHMARKS.md says.
func TestPlaceOrderAllocs(t *testing.T) {
	h := benchHandler()
	placeOrder(t, h) // the route's metrics and the pools made once
	limit := maxOrderAllocs
	if raceBuild {
		limit = raceOrderAllocs
	}
	n := testing.AllocsPerRun(500, func() { placeOrder(t, h) })
	t.Logf("%.0f allocations per order (race build: %v)", n, raceBuild)
	if n > float64(limit) {
		t.Errorf("%.0f allocations per order, at most %d (BENCHMARKS.md: %d without -race)", n, limit, maxOrderAllocs)
	}
}

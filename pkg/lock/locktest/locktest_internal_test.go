package locktest

import "testing"

// The suite's detector must be able to fail: two holds at once, and a token
// not above the previous, are counted.
func TestHoldCheckSeesOverlapAndTokenDrop(t *testing.T) {
	var h holdCheck
	h.inside.Add(1) // a hold in progress
	h.hold(5)
	h.hold(5)
	if h.overlaps.Load() != 2 || h.tokenDrops.Load() != 1 {
		t.Fatalf("overlaps %d, token drops %d; want 2 and 1", h.overlaps.Load(), h.tokenDrops.Load())
	}
}

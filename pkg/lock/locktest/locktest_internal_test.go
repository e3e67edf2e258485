package locktest

import (
	"testing"
	"time"
)

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

// MinTTL raises the suite's short TTLs, never lowers them.
func TestHarnessTTLRaisedToMinTTL(t *testing.T) {
	for _, tc := range []struct{ min, d, want time.Duration }{
		{0, 600 * time.Millisecond, 600 * time.Millisecond},
		{100 * time.Millisecond, time.Second, time.Second},
		{5 * time.Second, 600 * time.Millisecond, 5 * time.Second},
	} {
		if got := (Harness{MinTTL: tc.min}).ttl(tc.d); got != tc.want {
			t.Errorf("MinTTL %s, TTL %s: %s, want %s", tc.min, tc.d, got, tc.want)
		}
	}
}

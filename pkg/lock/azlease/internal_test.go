package azlease

import (
	"testing"
	"time"
)

// The Azure lease never ends before the TTL, and stays within what Azure
// accepts: 15..60 seconds, or infinite.
func TestLeaseSeconds(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int32
	}{
		{time.Millisecond, 15}, {time.Second, 15}, {15 * time.Second, 15},
		{15*time.Second + time.Millisecond, 16}, {60 * time.Second, 60}, {61 * time.Second, -1},
	} {
		if got := leaseSeconds(c.ttl); got != c.want {
			t.Errorf("leaseSeconds(%s) = %d, want %d", c.ttl, got, c.want)
		}
	}
}

// A lease is stale only when the headers, whole seconds, are at least TTL + 1s
// apart: the holder surely had its TTL.
func TestStale(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)
	for _, c := range []struct {
		ttl   time.Duration
		after time.Duration
		want  bool
	}{
		{time.Second, time.Second, false},
		{time.Second, 2 * time.Second, true},
		{600 * time.Millisecond, time.Second, false},
		{600 * time.Millisecond, 2 * time.Second, true},
		{0, time.Hour, false}, // unknown TTL: only Azure's lease ends it
	} {
		p := props{ttl: c.ttl, lastWrite: at, now: at.Add(c.after)}
		if got := p.stale(); got != c.want {
			t.Errorf("TTL %s, read %s after the last write: stale %v, want %v", c.ttl, c.after, got, c.want)
		}
	}
}

package lock

import (
	"slices"
	"sync"
	"time"
)

// lease is one lock held in the Backend over one or more resources, under a
// value of its own, with the fencing tokens reserved for them. A single-resource lease can pass from
// one local holder to the next (a cohort); it then serves the next token of its
// block to each of them.
type lease struct {
	value string // what the Backend knows the owner by
	names []string

	mu         sync.Mutex
	renewedAt  time.Time // when the last successful obtain or refresh was sent
	validUntil time.Time // renewedAt + TTL - drift: the lease is ours until then
	checkedAt  time.Time // when the Backend last confirmed the lease: obtain, refresh or check
	lost       bool      // the watchdog found it gone, or it ran out
	next       []int64   // next token per name
	top        []int64   // last token of the reserved block per name
	handoffs   int       // consecutive local holders after the first
}

func newLease(value string, names []string, sentAt time.Time, validity time.Duration, tops []int64, block int64) *lease {
	l := &lease{value: value, names: names, renewedAt: sentAt, validUntil: sentAt.Add(validity), checkedAt: sentAt, top: tops}
	l.next = make([]int64, len(tops))
	for i, t := range tops {
		l.next[i] = t - block + 1
	}
	return l
}

// take hands out the next token for every name, or reports that the lease cannot
// serve another holder: it is lost, about to end, or its token block is used up.
func (l *lease) take(now time.Time, minLeft time.Duration) ([]int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.validUntil.Sub(now) < minLeft {
		return nil, false
	}
	out := make([]int64, len(l.next))
	for i := range l.next {
		if l.next[i] > l.top[i] {
			return nil, false
		}
		out[i] = l.next[i]
	}
	for i := range l.next {
		l.next[i]++
	}
	return out, true
}

// spend gives up the rest of the token block: a token was advanced past it, so
// the block's remaining tokens may be refused, and the next local holder obtains
// the lease anew instead.
func (l *lease) spend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	copy(l.next, l.top)
	for i := range l.next {
		l.next[i]++
	}
}

func (l *lease) renewed(sentAt time.Time, validity time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost {
		l.renewedAt, l.validUntil = sentAt, sentAt.Add(validity)
		if sentAt.After(l.checkedAt) {
			l.checkedAt = sentAt
		}
	}
}

// checked records that the Backend confirmed the lease is ours at sentAt.
func (l *lease) checked(sentAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lost && sentAt.After(l.checkedAt) {
		l.checkedAt = sentAt
	}
}

// checkedWithin reports whether the Backend confirmed the lease less than d ago.
func (l *lease) checkedWithin(now time.Time, d time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.lost && now.Sub(l.checkedAt) < d
}

func (l *lease) markLost() {
	l.mu.Lock()
	l.lost = true
	l.mu.Unlock()
}

func (l *lease) state() (renewedAt, validUntil time.Time, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewedAt, l.validUntil, l.lost
}

// distinct returns the leases of ls without repeats, in first-seen order: a
// multi-resource lease appears once per name in a grant.
func distinct(ls []*lease) []*lease {
	if len(ls) == 1 {
		return ls
	}
	out := make([]*lease, 0, len(ls))
	for _, l := range ls {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

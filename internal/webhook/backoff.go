package webhook

import (
	"math/rand/v2"
	"time"
)

// The defaults of a Policy's zero fields.
const (
	// DefaultFirst is the first retry's ceiling.
	DefaultFirst = time.Second
	// DefaultMax is the ceiling no retry's wait goes past.
	DefaultMax = 5 * time.Minute
	// DefaultFor is how long after the first failure retries go on.
	DefaultFor = time.Hour
)

// Policy is a retry schedule: exponential backoff with "equal" jitter, for a
// bounded time. The n-th retry (n from 1) waits a random duration between
// half of and the whole of its ceiling, min(Max, First·2^(n-1)). Equal jitter
// rather than full: the waits of many endpoints spread out all the same, and
// none comes back at once, so a failing endpoint is never hammered. Retries
// stop For after the first failure; the last wait is shortened to end then,
// so that the last attempt is made at the bound rather than skipped.
//
// A Policy does not sleep: Next says how long to wait, and the caller (a
// relay with its own clock) schedules the attempt. A response's Retry-After
// (StatusError.RetryAfter) is the caller's to honour: wait the longer of the
// two.
type Policy struct {
	// First is the first retry's ceiling; zero means DefaultFirst.
	First time.Duration
	// Max caps every ceiling; zero means DefaultMax, and one below First is
	// raised to First.
	Max time.Duration
	// For bounds the retries, from the first failure; zero means DefaultFor.
	For time.Duration
	// Rand returns a number in [0, 1) to draw the jitter from; nil means
	// math/rand/v2's Float64. Tests inject a fixed one.
	Rand func() float64
}

// Next says, after a failed attempt, how long to wait before the next one, or
// that it is time to give up and mark the message failed. attempt is the
// number of failed attempts so far (1 after the first failure), firstFailure
// the time of the first, now the time of the last.
func (p Policy) Next(attempt int, firstFailure, now time.Time) (wait time.Duration, giveUp bool) {
	p = p.withDefaults()
	left := p.For - now.Sub(firstFailure)
	if left <= 0 {
		return 0, true
	}
	ceiling := p.Ceiling(attempt)
	half := ceiling / 2
	wait = half + time.Duration(p.Rand()*float64(ceiling-half))
	return min(wait, ceiling, left), false
}

// Ceiling is the longest wait after the given failed attempt, before the
// bound of For: min(Max, First·2^(attempt-1)).
func (p Policy) Ceiling(attempt int) time.Duration {
	p = p.withDefaults()
	c := p.First
	for i := 1; i < attempt && c < p.Max; i++ {
		if c > p.Max/2 { // doubling would pass Max (or overflow)
			return p.Max
		}
		c *= 2
	}
	return min(c, p.Max)
}

// withDefaults fills the zero (or negative) fields.
func (p Policy) withDefaults() Policy {
	if p.First <= 0 {
		p.First = DefaultFirst
	}
	if p.Max <= 0 {
		p.Max = DefaultMax
	}
	p.Max = max(p.Max, p.First)
	if p.For <= 0 {
		p.For = DefaultFor
	}
	if p.Rand == nil {
		p.Rand = rand.Float64
	}
	return p
}

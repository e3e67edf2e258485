package ratelimit

import (
	"math"
	"strconv"
)

// The response header fields of draft-ietf-httpapi-ratelimit-headers and the
// name of the one policy this package advertises in them.
const (
	HeaderPolicy = "RateLimit-Policy"
	HeaderLimit  = "RateLimit"
	PolicyName   = "default"
)

// Headers renders the values of the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers (Structured Fields, a quoted policy
// name with parameters) for a decision, to be sent on every answer, 429s
// included:
//
//	RateLimit-Policy: "default";q=<burst>;w=<seconds to refill the burst>
//	RateLimit: "default";r=<remaining>;t=<seconds>
//
// The policy says the caller may spend q units at once and gets them all back
// in w seconds (w is a whole number of seconds, rounded up: the policy never
// promises more than the limit gives). On an allowed request t is the seconds
// until the bucket is full again; on a refusal r is 0 and t is the
// Retry-After value, as the draft asks when both fields are sent.
func Headers(d Decision) (policy, current string) {
	q, w := d.Limit.quota()
	policy = `"` + PolicyName + `";q=` + strconv.Itoa(q) + ";w=" + strconv.Itoa(w)
	t := ceilSeconds(d.ResetAfter)
	if !d.Allowed {
		t = d.RetryAfterSeconds()
	}
	current = `"` + PolicyName + `";r=` + strconv.Itoa(max(d.Remaining, 0)) + ";t=" + strconv.Itoa(t)
	return policy, current
}

// quota is the policy's q and w: the burst, and the whole seconds it takes to
// come back (at least 1).
func (l Limit) quota() (q, w int) {
	if !l.Valid() {
		return max(l.Burst, 0), 1
	}
	secs := math.Ceil(float64(l.Burst) / l.PerSecond)
	if secs > math.MaxInt32 {
		secs = math.MaxInt32
	}
	return l.Burst, max(int(secs), 1)
}

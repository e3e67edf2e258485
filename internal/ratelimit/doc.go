// Package ratelimit enforces each API client's rate limit across every
// replica (OWASP API4): a client with Limit{PerSecond: r, Burst: b} gets at
// most r × elapsed + b requests accepted in all, however it spreads them over
// the replicas, and a small per-address limit on failed authentications.
//
// # Shared buckets, leased in chunks
//
// The limit itself is one GCRA bucket per client in Redis, kept by
// github.com/go-redis/redis_rate (rate:{<namespace>:ratelimit:<client>}).
// Asking Redis on every request would put a round trip on the order path, so
// each replica leases units in chunks: AllowAtMost takes up to n units in one
// call, and the replica spends them locally, going back to Redis only when
// they are spent. n is LeaseFraction (default 1/20) of the burst or of the
// units the rate gives back in LeaseTTL, whichever is less, and at least 1
// (rate 200/s, burst 400: 10; rate 1000/s, burst 1000: 50). Concurrent requests
// of one client on one replica share the lease in flight: one calls Redis,
// the others wait for its chunk. Units not spent within LeaseTTL (default 1s)
// are dropped, so no replica sits on a stash. When Redis has no unit left, the
// replica refuses that client locally until a whole chunk has come back,
// so a client over its limit costs one call per chunk, not per request.
//
// # The bound
//
// Redis never grants more than r × t + b units over a window of t seconds,
// and a replica never accepts a request without a granted unit. A replica may
// spend in a window units it leased just before it, at most one chunk, so
// over any window, with R replicas:
//
//	accepted ≤ r × t + b + R × n ≤ r × t + b × (1 + R × LeaseFraction)
//
// (when LeaseFraction × b < 1, n is 1 and the excess at most R units). With
// the default 1/20 and three replicas the excess is at most 15% of the
// burst, and so within 15% of r × t + b; with more replicas, set
// LeaseFraction to 0.15 ÷ R. Over the whole life of a bucket there is no
// excess at all.
//
// The client can lose a little too. Units a replica leased and did not
// spend within LeaseTTL are gone; since n is at most LeaseFraction of the
// units of one LeaseTTL, a replica draws at most LeaseFraction of the rate
// beyond what it spends, so a client using less than 1 − R × LeaseFraction
// of its rate (85% by default) is not refused for it, however it spreads
// its requests. A refused replica asks again once a whole chunk is back, so
// at most a chunk per replica is waiting when a window ends. And
// redis_rate's AllowAtMost, finding fewer than n units, takes the fraction
// of a unit it cannot grant: at most one unit per such call.
//
// # When Redis is down
//
// A Redis call that fails or outlives Options.Timeout (default 100ms) switches
// the replica to a fallback of its own: a golang.org/x/time/rate limiter per
// client at the same rate and burst. Each replica then limits alone, so a
// client spreading its requests over R replicas gets up to R times its limit
// for the outage: the service stays up rather than refusing everyone. The
// first failure of an outage is logged once, at warn; while it lasts, one
// request per ProbeInterval (default 1s) tries Redis again, and the first
// answer ends the outage (logged at info) and brings the shared buckets back.
//
// # Failed authentication
//
// FailedAuth counts failed authentications per source address in a bucket of
// its own (rate:{<namespace>:ratelimit-auth:<addr>}), shared by the replicas
// like the clients' and with the same fallback, at Options.FailedAuth
// (default 10 per second, burst 20).
//
// # Headers
//
// Headers renders the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers from a Decision, and
// Decision.RetryAfterSeconds the Retry-After of a refusal; the HTTP layer only
// copies them. docs/ratelimits.md has the measurements.
package ratelimit

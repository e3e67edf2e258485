// Package lock takes per-resource locks in Redis for processes that must not act on
// the same resource at once: several replicas selling the last unit of one SKU, say.
// It builds on bsm/redislock (SET NX PX with a random token, token-checked refresh
// and release) and adds what that library leaves to its users on purpose:
//
//   - Scoped use. Client.Do locks one or several resources, runs a function and
//     always releases. Names are sorted, so callers with overlapping sets never
//     deadlock; resources that share a Redis Cluster slot (or any set on a
//     non-cluster server) are obtained at once with ObtainMulti, others one by one
//     in sorted order.
//   - A watchdog. While the function runs, the lease is renewed every RenewEvery
//     (TTL/3 by default). When a renewal finds the lock gone, or none succeeds
//     before the lease would end, the function's context is cancelled at once with
//     a cause wrapping ErrLeaseLost. The watchdog stops before Do returns.
//   - Fencing tokens. Each grant carries, per resource, a number larger than any
//     issued before for it, handed out only to the current holder (the script that
//     issues them checks the lock first). Give it to the store with every write the
//     lock protects, and have the store refuse a token older than one it has
//     accepted: a holder paused past its lease then cannot write.
//   - Waiting without a polling storm. Callers of one Client queue per resource in
//     FIFO order, so only the head of the queue talks to Redis. A release is
//     announced on a pub/sub channel and wakes the waiters of other processes at
//     once; a jittered, doubling poll is the safety net for a holder that died
//     without announcing.
//   - Cohorts. A holder that finishes while another caller of the same Client
//     waits for the same resource passes the lease on instead of releasing it,
//     at most MaxHandoffs times in a row so that other processes get their turn.
//     The next holder checks in Redis that the lease is still its own before it
//     takes the next token of the block reserved with the lease; the watchdog
//     guards every holder as it guards the first.
//   - Metrics: Prometheus collectors for grants, waits, holds, renewals, lost
//     leases and contention (NewMetrics).
//
// # Keys
//
// Every key of one resource shares the hash tag {<namespace>:<name>}: the lock
// {sku:A-1}:lock and its token counter {sku:A-1}:fence live in one Cluster slot
// with any key the service keeps for the resource. Releases are announced on
// <namespace>:lock:released.
//
// # Tokens when Redis restarts without persistence
//
// A Redis that restarts empty loses every lock and every token counter. The
// holders of the lost locks notice at their next renewal and are cancelled; a
// stale holder that writes before it notices is refused by the store once anyone
// has written with a newer token. A counter that does not exist is created at the
// server's clock in microseconds (TIME) rather than at zero, so tokens issued after
// the restart are above those issued before it, and the store, which keeps the
// largest token it has accepted per resource, goes on accepting them. This holds
// while fewer than a million tokens per second are taken for one resource
// (MaxHandoffs+1 per lease obtained) and the Redis host's clock does not step back
// across the restart; should it, the store refuses the new holders' writes (safe)
// until the counter passes the stored token. The same seeding lets a counter
// unused for a week expire instead of living forever.
//
// # Deadlines
//
// Every Redis call has a deadline: OpTimeout, or for a renewal the end of the
// lease. go-redis honours a context's deadline only with ContextTimeoutEnabled set
// on its options; set it, or a stalled Redis holds calls until the read timeout.
package lock

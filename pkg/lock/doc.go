// Package lock takes per-resource locks for processes that must not act on the
// same resource at once: several replicas selling the last unit of one SKU, say.
// A Client runs over a Backend, the lock service, each in a package of its
// own: one Redis, standalone, Sentinel or Cluster (redislease), Redlock over
// several Redis masters (redlock), PostgreSQL (pglock), etcd (etcdlock),
// ZooKeeper (zklock) and Azure blob leases (azlease), each checked by the same
// conformance suite (locktest). This package holds what they share and
// imports none of them. Open opens one by URL, as database/sql opens a
// database: each backend's package registers its schemes (Register) when
// imported, so a program links only the backends it imports. A Backend only leases resources, issues their
// fencing tokens and, if it can, announces releases; the Client adds, the same
// for every Backend, what a library such as bsm/redislock leaves to its users
// on purpose:
//
//   - Scoped use. Client.Do locks one or several resources, runs a function and
//     always releases. Names are sorted, so callers with overlapping sets never
//     deadlock; they are obtained at once, unless the Backend is a Grouper (Redis
//     Cluster: only names that share a slot are obtained at once, others one by
//     one in sorted order). A Backend that refuses some names (a NameChecker)
//     refuses them before any call.
//   - A watchdog. While the function runs, the lease is renewed every RenewEvery
//     (TTL/3 by default). When a renewal finds the lock gone, or none succeeds
//     before the lease would end, the function's context is cancelled at once with
//     a cause wrapping ErrLeaseLost. The watchdog stops before Do returns.
//   - Fencing tokens. Each grant carries, per resource, a number above the ones
//     issued before it (each Backend's documentation states the exact terms),
//     handed out only to the current holder. Give it to the store with every
//     write the lock protects, and have the store refuse a token not above the
//     largest it has accepted: a holder paused past its lease then cannot write.
//     When the store refuses a token because the Backend lost the counter's
//     latest writes, Grant.Advance moves the counter past it for the current
//     holder. So the store, not the lock service, is what makes tokens safe.
//   - Waiting without a polling storm. Callers of one Client queue per resource in
//     FIFO order, so only the head of the queue talks to the Backend. A Backend
//     that is a Notifier announces releases, which wake the waiters of other
//     processes at once; a jittered, doubling poll is the safety net for a holder
//     that died without announcing.
//   - Cohorts. A holder that finishes while another caller of the same Client
//     waits for the same resource passes the lease on instead of releasing it,
//     at most MaxHandoffs times in a row so that other processes get their turn.
//     The next holder checks in the Backend that the lease is still its own before it
//     takes the next token of the block reserved with the lease; the watchdog
//     guards every holder as it guards the first.
//   - Metrics: Options.Metrics records grants, waits, holds, renewals, lost
//     leases and contention (the Metrics interface); package lockprom's are
//     Prometheus collectors. This package imports no metrics library.
//
// # Deadlines
//
// Every Backend call has a deadline: OpTimeout, or for a renewal the end of the
// lease. Each Backend honours it (see its package: the Redis ones need
// ContextTimeoutEnabled on the go-redis client).
package lock

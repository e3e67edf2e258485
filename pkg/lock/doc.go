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
// # Round trips of several names
//
// A Grant over several names is one lease in the Backend (one per Grouper
// group): the Client obtains the names in one Obtain call, renews the lease
// in one Renew call per watchdog round and releases it in one Release call;
// a lease over several names is never handed on name by name. (A grant whose
// names came one by one from earlier local holders keeps their single-name
// leases, each under a value of its own: one call per such lease.) What one
// call over N names costs, in round trips of wall time (calls sent at once
// count as one), once connections are up:
//
//	backend               Obtain                          Renew          Release
//	redislease            1 script                        1 script       1 script
//	redislease, Cluster   1 per name (a Grouper)          1 per name     1 per name
//	redlock               2, to every master at once      1              1
//	pglock                1 (two statements, one batch)   1 statement    1 statement
//	etcdlock              2 (lease grant, transaction)    1 keep-alive   1 revocation
//	zklock                2 (a Multi, then N reads)       1 Multi        1 Multi
//	azlease               3 per name, one after another   1 (2N calls)   1 (N calls)
//
// Only the Cluster's and Azure's grow with N. Redis Cluster runs a script on
// one slot, and every name has a slot of its own (its hash tag), so names are
// obtained one by one in sorted order unless they all share a slot. etcd
// grants a lease in a call of its own before the transaction that puts the
// keys on it; ZooKeeper's client has no read-only Multi, so an obtain reads
// the N resource nodes in N pipelined requests. An Azure blob lease is a
// property of one blob: Azure Storage acquires, renews and releases leases
// blob by blob (its batch API takes only deletions and tier changes, and no
// transaction spans blobs), so Obtain takes the names in sorted order and
// gives back those it took when one is busy, and Renew and Release send their
// calls at once. Each backend's documentation has the details: a busy or
// contended obtain, the first use of a statement or script, Redis's Replicas.
//
// # Deadlines
//
// Every Backend call has a deadline: OpTimeout, or for a renewal the end of the
// lease. Each Backend honours it (see its package: the Redis ones need
// ContextTimeoutEnabled on the go-redis client).
package lock

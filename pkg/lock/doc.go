// Package lock takes per-resource locks for processes that must not act on the
// same resource at once: several replicas selling the last unit of one SKU, say.
// A Client runs over a Backend, the lock service: Redis here (NewRedis: one
// standalone, Sentinel or Cluster Redis; New is the shortcut); Redlock,
// PostgreSQL, etcd, ZooKeeper and Azure blob leases in the sub-packages
// (redlock, pglock, etcdlock, zklock, azlease), each checked by the same
// conformance suite (locktest). Open opens one by URL, as database/sql opens a
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
//     one in sorted order).
//   - A watchdog. While the function runs, the lease is renewed every RenewEvery
//     (TTL/3 by default). When a renewal finds the lock gone, or none succeeds
//     before the lease would end, the function's context is cancelled at once with
//     a cause wrapping ErrLeaseLost. The watchdog stops before Do returns.
//   - Fencing tokens. Each grant carries, per resource, a number above the ones
//     issued before it (see "Fencing tokens" below for the exact terms), handed out
//     only to the current holder (the script that issues them checks the lock
//     first). Give it to the store with every write the lock protects, and have the
//     store refuse a token not above the largest it has accepted: a holder paused
//     past its lease then cannot write. When the store refuses a token because
//     Redis lost the counter's latest writes, Grant.Advance moves the counter past
//     it for the current holder.
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
//   - Metrics: Prometheus collectors for grants, waits, holds, renewals, lost
//     leases and contention (NewMetrics).
//
// # Redis keys
//
// Every key of one resource shares the hash tag {<namespace>:<name>}: the lock
// {sku:A-1}:lock, its token counter {sku:A-1}:fence and its waiters mark
// {sku:A-1}:waiters live in one Cluster slot with any key the service keeps for
// the resource. One script sets the lock and issues its tokens (one round trip
// per obtain). A try that finds the lock held sets the waiters mark, and the
// release that finds the mark announces itself on <namespace>:lock:released: an
// uncontended lock sends no message.
//
// # Fencing tokens
//
// What follows is the Redis backend's guarantee; each other Backend states its
// own. A token counter is a hybrid clock: before a block of tokens is taken, a
// counter behind the Redis server's clock in microseconds (TIME) is moved up to
// it. What follows, per resource:
//
//   - While Redis loses no write, tokens strictly increase, and no two grants
//     carry the same one (a cohort's holders take successive tokens of the block
//     reserved with the lease).
//   - When Redis loses writes (a restart without persistence, a failover to a
//     replica that had not received them, a restore from an old snapshot), a
//     token issued afterwards is still above every token issued before, provided
//     that the clock of the Redis now serving reads later than the clock of the one
//     that issued the lost tokens did when it issued them (in step to within the
//     time the loss took: a failover takes seconds), and that fewer than a million
//     tokens per second were taken for that resource (a counter taken faster runs
//     ahead of the clock, and the lead is what a loss can repeat).
//   - When either condition fails, a token can repeat one issued before. Redis
//     cannot tell; the store can, if it keeps the largest token it has accepted per
//     resource and refuses any token not above it (equal included: two grants never
//     commit under one token). The holder then calls Grant.Advance with the token
//     the store has, which moves the counter above it and returns a new token, in
//     one script that first checks the lock is still the caller's. A holder that
//     has lost its lock gets ErrLeaseLost instead; one that still holds it writes
//     after one more round trip.
//
// So the store, not Redis, is what makes tokens safe: Redis keeps them large
// enough that the store rarely has to refuse one.
//
// # Deadlines
//
// Every Backend call has a deadline: OpTimeout, or for a renewal the end of the
// lease. go-redis honours a context's deadline only with ContextTimeoutEnabled set
// on its options; set it, or a stalled Redis holds calls until the read timeout.
package lock

// Package redlock is a lock.Backend over N independent Redis masters (N >= 3):
// the Redlock algorithm as published in the Redis documentation, with fencing
// tokens that hold across its majorities. Put a lock.Client over it
// (lock.NewClient) for the local queue, the cohort handoff, the watchdog and
// the metrics, as over the single-Redis backend.
//
// Why not go-redsync/redsync: it locks one resource per mutex with its own
// value, so it cannot take several resources all or none under a value the
// caller chooses, it issues no fencing tokens, and it has nothing like
// lock.Backend's Held or Advance. This package is written on go-redis v9
// instead, with one Lua script per concern and node.
//
// # The algorithm
//
// The quorum is N/2+1. Every call goes to every node in parallel and waits for
// each answer or its timeout (the call's deadline, and the client's timeouts:
// see ParseURL); a node that does not answer in time counts as not agreeing.
//
//   - Obtain, phase 1 (obtain.lua): on each node, when none of the call's names
//     is held by another value, set them all to the caller's value with the TTL
//     (SET PX) and return the node's counter of each; otherwise set nothing. When
//     a majority granted, phase 2 (raise.lua) writes the tokens (below) on the
//     granting nodes, checking the locks are still the caller's. The grant
//     stands when a majority confirmed phase 2 and the whole took less than the
//     validity, TTL - TTL*DriftFactor - 2ms. Otherwise the call releases on every
//     node what it may have set and fails: with an error wrapping ErrNoQuorum
//     when too many nodes did not answer for any majority to be counted (a
//     service answers 503 at once), with lock.ErrBusy otherwise (held by others,
//     a split among contenders, too slow: the Client waits and tries again).
//   - Renew (renew.lua) extends the lease on every node that still holds the
//     value; it succeeds when a majority did, within the validity.
//   - Held is true when a majority of the nodes hold the value.
//   - Release (release.lua) deletes, on every node, the keys that hold the
//     value, and announces awaited releases (below).
//   - Renew and Advance fail with lock.ErrNotHeld when the nodes that deny the
//     value leave no majority possible, with ErrNoQuorum when too few answered.
//
// Round trips, each one parallel round to all the nodes: Obtain 2 (phase 1,
// then phase 2; a failed one adds a release), Renew 1, Held 1, Release 1,
// Advance 2. A lock.Client computes each lease's validity from when Obtain was
// sent and ends it TTL/20 + 2ms early, which covers DriftFactor's 1% and the
// time both rounds took.
//
// The keys are those of the single-Redis backend, on every node:
// {<namespace>:<name>}:lock, :fence (the token counter) and :waiters (the mark
// a refused try leaves so that the release announces itself on
// <namespace>:lock:released; an uncontended lock sends no message). Subscribe
// listens on every node and merges what they announce; a release is announced
// once per node that had the mark.
//
// # Fencing tokens
//
// The published algorithm issues none, and the obvious scheme is wrong: if each
// node increments its own counter and the grant takes the largest over its
// majority, tokens can go down (counters 100, 50, 50 on three nodes: a grant
// on nodes 1 and 2 gets 101, the next on nodes 2 and 3 gets 51). Here the
// token is agreed across the majority instead:
//
//   - Each node keeps a counter per resource. Phase 1 returns it, moved up to the
//     node's clock in microseconds (TIME) when it is behind: a hybrid clock, as
//     in the Redis backend.
//   - The grant's top T is the largest value the granting nodes returned, plus
//     block; its tokens are T-block+1 .. T. Phase 2 raises the counter of every
//     granting node to T (never lowers one), checking in the same script that
//     the node's lock is still the caller's.
//   - Advance(name, value, past) reads the counters of the nodes that confirm
//     the value holds the lock (peek.lua), and when a majority did, raises them
//     to N = max(those counters, past) + 1 (raise.lua, checking the lock again),
//     and returns N when a majority confirmed it; lock.ErrNotHeld otherwise.
//
// The guarantee. Take two grants G1 and G2 of one resource that both stood
// (phase 2 confirmed on a majority M1 for G1). Since M1 and the majority that
// granted G2 share a node, and a node holds one lock at a time, the two held
// that node one after the other; say G1 first. Then every token of G2 is above
// every token of G1, unless every node that both confirmed G1's phase 2 and
// granted G2's phase 1 lost its counter in between (a restart without
// persistence, a failover to a replica that had not received the write, a
// FLUSHALL, an expiry after a week unused) and, in addition, none of the clocks
// of G2's granting nodes read, when G2 took them, later than T1 (G1's top)
// in microseconds. A clock covers T1 when T1 was not ahead of the clock that
// set it (counters taken at most a million times a second per resource do not
// run ahead of TIME) and the covering clock is not behind that one. A token
// returned by Advance is covered in the same way as a grant's top. The order is the order in which the grants held that common
// node: the earlier one's lock there had ended (expired or released) before the
// later one set its own, and it is the same on every node they share (phase 2
// starts only when phase 1 has ended everywhere).
//
// So a token can fail to grow only after counters were lost, and how many must
// be lost depends on how many nodes confirmed the earlier grant: with N = 3 and
// a grant confirmed on exactly two nodes, one of them restarting empty can be
// enough, when the next grant is on it and the third node and the counters ran
// ahead of the clocks (or the clocks are behind). A grant confirmed on all three
// needs two of them to lose their counters.
//
// When a token fails to grow it can repeat one issued before. The store's fence
// is what makes that safe: it must keep the largest token it accepted per
// resource and refuse any token not above it (equal included). The holder then
// calls lock.Grant.Advance with the token the store has; this backend's Advance
// moves a majority's counters above it, so the holder writes after two more
// round trips and later grants take tokens above it. A holder that lost its lock
// gets lock.ErrLeaseLost instead.
//
// Losing state costs more than tokens: a node that restarts empty while it was
// in a lease's majority can grant the same resource to another process while
// the first still believes it holds it (the algorithm's known limit). Restart a
// node without persistence only after the longest TTL has passed (a delayed
// restart, as the algorithm's authors advise), or run it with AOF and
// appendfsync always; the fence then still refuses the older holder's writes.
//
// # Deadlines
//
// Every call honours its context's deadline on every node, and waits at most
// for the slowest node's answer or timeout: give each client
// ContextTimeoutEnabled and small timeouts (ParseURL does). A failed obtain
// releases what it set even when the context has ended, for at most a second.
package redlock

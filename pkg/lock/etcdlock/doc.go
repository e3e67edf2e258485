// Package etcdlock is a lock.Backend on etcd: leases are etcd leases, fencing
// tokens come from etcd's revision, and waiters learn of a release from a watch
// on the holder's key instead of polling. It suits a deployment that already
// runs etcd (a Kubernetes control plane's own is not meant for it: use a
// separate cluster) and wants a lock whose tokens survive restarts and leader
// changes without a clock.
//
// # Keys
//
// Under a prefix (DefaultPrefix, or the URL's path), per resource name:
//
//	<prefix>lock/<name>   the owner's value, attached to the owner's etcd lease
//	<prefix>floor/<name>  a decimal int64 raised by Advance; absent means 0
//
// # Calls and round trips
//
// Obtain grants an etcd lease of the TTL (one round trip), then runs one
// transaction over every name: if no lock key exists (CreateRevision == 0),
// put each, attached to the lease, and read each floor key; else read the lock
// keys (one round trip). All or none, so callers with overlapping sets cannot
// deadlock. When busy, the unused lease is revoked in the background (a third
// round trip, not waited for) and the error wraps lock.ErrBusy. The Backend
// keeps value -> lease ID in memory.
//
// Renew is KeepAliveOnce of the value's lease (one round trip): etcd restarts
// the lease's TTL. A lease etcd no longer has (expired or revoked) fails with
// lock.ErrNotHeld, as does a value this Backend never obtained. The lock keys
// live exactly as long as their lease, since nothing but their holder's Release
// deletes them, so a live lease means held keys.
//
// Held is one linearizable read of the lock key. Release revokes the lease (one
// round trip), which deletes all its keys in one revision; a value not in
// memory (or only some of a lease's names) is released by one transaction that
// deletes each key still holding the value (one round trip), a no-op for a
// non-holder. Advance is two: a read of the lock and floor
// keys, then a write of the floor guarded by the lock key's value and the
// floor's ModRevision (retried, at most 4 times, if the floor moved).
//
// # The TTL
//
// etcd leases are whole seconds and the server raises a TTL under its minimum
// (1.5 election timeouts rounded up: 2s with the default 1s election timeout).
// Obtain rounds the TTL up to seconds, so the lease never ends before the
// Client's: the Client still measures validity from the TTL it asked for, on
// its own clock, from before the Grant was sent, and cancels the work in time.
// The cost is the other side: a holder that crashed keeps its resources until
// etcd's lease ends (2s for a TTL of 1s, 10s for 10s), plus up to the lessor's
// expiry check (every 500ms) and a commit. A lease also outlives a restart or a
// change of leader of etcd: the new leader gives every lease its full TTL again
// then, so a crashed holder can block for one TTL more.
//
// Renew refreshes to the TTL the lease was granted with; a Renew for a longer
// TTL than the Obtain's fails with lock.ErrInvalidOptions (the Client never
// does that).
//
// # Fencing tokens
//
// A grant's block is floor + R*BlockCap - block + 1 .. floor + R*BlockCap, where
// R is the revision of the obtain's transaction (the lock key's ModRevision)
// and floor the resource's floor key read in that same transaction. Obtain
// refuses block > BlockCap (1024) with lock.ErrInvalidOptions. etcd's revision
// is cluster-wide, strictly increasing with every write, linearizable through
// Raft and persisted with the data: a later grant has R' > R and a floor not
// lower, so its block lies above the earlier block. Advance(past) writes
// floor' = max(floor, past - r*BlockCap), with r the revision of its read, and
// returns floor' + R*BlockCap with R > r the revision of the write: above past,
// above the grant's block, and below every later grant's block.
//
// Across a change of leader the same holds: a revision is given to an entry
// when it is applied, after a quorum committed it, and a new leader has every
// committed entry (Raft elects only a member whose log is as long), so the
// first revision it assigns is above every revision acknowledged before: a
// token obtained after the change is above every token obtained before it.
// faults/ensembles_test.go kills a three-member cluster's leader under
// contention and compares the tokens from before and after.
//
// So, per resource, tokens strictly increase, and no two grants share one, as
// long as etcd's revision and floor keys do not go back. They do not across
// restarts of members (every write is in the WAL, fsynced, before it is
// acknowledged; TokensSurviveRestart), leader changes or compaction (which
// drops old versions, never the current revision). They can go back, and a
// token can repeat, when:
//
//   - the cluster is recreated empty (data directories lost): revisions start
//     again at 1;
//   - it is restored from a snapshot (the writes after the snapshot are lost,
//     unless the restore bumps the revision past them), or the floor keys are
//     deleted or lowered by hand;
//   - a member runs with --unsafe-no-fsync and the machine crashes.
//
// The store covers them: it keeps the largest token it has accepted per
// resource and refuses any token not above it; the holder then calls
// lock.Grant.Advance with the store's token.
//
// Overflow: R*BlockCap must stay below 2^63, so R below 2^53 (9e15 revisions:
// at 100,000 writes a second to the cluster, 2,800 years), less what Advance
// added to a floor. A token that would overflow fails the call instead, and
// Advance refuses (lock.ErrInvalidOptions), before writing, a past that would
// leave fewer than 2^30 revisions before that.
//
// # On a cluster
//
// The URL lists the members (etcd://h1:2379,h2:2379,h3:2379/prefix); the
// client spreads calls over them and moves off a member that is down (its
// connection refused) at once. A member that is stopped, not down, keeps its
// connection until a keep-alive probe goes unanswered (KeepAliveTime, gRPC's
// least, and KeepAliveTimeout: 13s): until then the calls sent there wait for
// their deadline, and fail. Without a quorum every call fails (a grant needs a
// committed write, Held a linearizable read): the Client answers
// lock.ErrUnavailable, never a grant.
//
// # Clocks
//
// etcd measures a lease on the leader's monotonic clock, from when it granted
// or renewed it; clients send only durations. A stopped or stalled leader does
// not expire leases while stopped; when it continues, the leases whose time has
// passed end at its next check. The Client's validity is on its own clock from
// before the Grant or KeepAlive was sent, TTL less 5% and 2ms, while etcd's
// lease is at least the TTL from later: work is cancelled before another owner
// can get the resource unless the clocks' rates differ by more than that.
//
// # Waiting
//
// The Backend is a lock.Notifier. An Obtain that finds a name held, while
// anyone subscribes, watches that holder's lock key (the predecessor) from the
// revision after its read, and announces the name when the key is deleted:
// released, or its lease expired. One watch per awaited name at a time, 4096
// at most per Backend; watches share one gRPC stream and need a leader (a
// member cut off from the others breaks them, which announces the name so the
// waiter retries). Its own releases are announced at once. A release thus
// costs no extra call, and only processes waiting for that resource hear of it.
package etcdlock

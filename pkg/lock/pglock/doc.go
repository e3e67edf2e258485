// Package pglock is a lock.Backend on PostgreSQL: the lock service is a table
// of the database the service already has, one row per resource, so a
// deployment without Redis still gets the lock.Client (its local FIFO queue,
// cohort handoff, watchdog and metrics) over a lease and a fencing token.
//
// # The lock row
//
//	resource    text PRIMARY KEY
//	holder      text NULL          -- the owner's random value; NULL when free
//	lease_until timestamptz        -- on the database's clock
//	token       bigint NOT NULL    -- the fencing counter; only grows
//
// Obtain is a guarded INSERT ... ON CONFLICT (resource) DO UPDATE ... WHERE the
// row is free or its lease has ended on the database's clock (clock_timestamp()),
// which adds block to token and returns it. The rows of one call are taken in
// one order (the names sorted bytewise, as the Client sorts them), so callers
// with overlapping sets wait for each other in that order and cannot deadlock.
// One name is one statement; several are two statements sent together, one
// transaction: the INSERT, then an UPDATE that frees again the rows it took
// (and takes their block off their tokens) unless it took every one, and
// Obtain then fails with an error wrapping lock.ErrBusy. Either way one round
// trip (on a connection that has not run them yet, one more prepares them).
// Renew, Held, Advance and Release are one statement, one round trip each,
// whatever the number of names. Release sets holder to NULL where the caller still holds the row and, in
// the same statement, calls pg_notify(Channel, resource): PostgreSQL delivers
// the notification at commit, so a waiter woken by it finds the row free.
// Subscribe LISTENs on a connection of its own (not one of the pool's).
//
// A statement that fails because its connection broke (a terminated session, a
// restarted server) is retried once on another connection while the call's
// deadline allows. That is safe for every call: Obtain's guard also admits the
// caller's own value, so a retry of an obtain that did commit takes the row
// again (with a higher token) instead of finding it busy.
//
// # Fencing tokens
//
// A token is the durable column of the resource's row, and every transaction
// that changes it adds at least 1 (Obtain adds the block, Advance sets
// greatest(token, past) + 1; a refused obtain of several names takes off, in
// its own transaction, only what it added), in the same transaction that
// checks the lease. So,
// per resource, as long as PostgreSQL keeps every transaction it reported
// committed, a block reserved by Obtain lies strictly above every token issued
// before, and no two grants carry the same token. Unlike the Redis backend's,
// the guarantee does not depend on any clock.
//
// It fails, and a token issued afterwards can repeat one issued before, exactly
// when committed transactions are lost or undone:
//
//   - a failover to an asynchronous standby that had not received the last
//     commits (with synchronous replication, only when the standby that takes
//     over was not among the synchronous ones);
//   - a restore from a backup, or a point-in-time recovery to before the last
//     commits;
//   - synchronous_commit = off (or fsync = off) and a crash of the server: the
//     last commits, reported to the client, were not yet on disk;
//   - the table changed by hand (a row deleted, the table truncated or dropped).
//
// The store covers all of them: it keeps the largest token it has accepted per
// resource and refuses any token not above it (equal included). The holder then
// calls lock.Grant.Advance with the token the store has, which moves the row's
// token above it, only while the caller holds the row, and returns a new one.
//
// # Clocks
//
// A lease ends on the database's clock: lease_until is clock_timestamp() + TTL
// when the statement runs, and "free" means lease_until <= clock_timestamp().
// Clients never send a time, only durations, so a client's wall clock, however
// wrong, changes nothing. The Client measures a lease's validity on its own
// monotonic clock from when it sent the Obtain or Renew (TTL - TTL/20 - 2ms
// after), which is before the statement ran: it cancels the work before the row's
// lease ends, unless the database's clock runs fast against the client's by more
// than that margin over a lease (or is stepped forward), in which case another
// owner can take the row while the first still works. The fencing token still
// refuses the first owner's late writes.
//
// # Why a row, not an advisory lock
//
// pg_advisory_lock is simpler but is a session's: a held lock pins a connection
// for as long as it is held, it ends the moment that session dies (a broken
// connection silently ends the lock while its owner still works), and it has
// no token. A row holds a lease that outlives its owner's session, and a dead
// owner's, only for the TTL, carries a durable fencing token, and needs a
// connection only for each statement.
//
// # Costs
//
// Every lease writes its row (obtain, each renewal, release): a dead tuple each,
// for autovacuum to clear, and a WAL record. NOTIFY serialises the commits that
// notify on a database-wide lock; a release is announced every time, since
// PostgreSQL cannot tell whether anyone waits.
package pglock

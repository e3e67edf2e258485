// Package azlease is a lock.Backend on Azure Blob Storage leases: a deployment
// on Azure without Redis gets the lock.Client (its local FIFO queue, cohort
// handoff, watchdog and metrics) over a storage account it already has. The
// tests run it on Azurite, the storage emulator.
//
// # The lock blob
//
// Each resource is an empty block blob, <prefix><name> in one container,
// created on first use (Upload with If-None-Match: *). Its lease is the lock;
// its metadata holds
//
//	token   the top of the last block of fencing tokens issued; only grows
//	holder  the lease ID of the holder's value
//	ttlms   the holder's TTL in milliseconds
//
// A lease ID is a UUID derived from the owner's value (LeaseID), so a process
// needs nothing but the value to renew or release, and another value's calls
// fail with a lease-ID mismatch: Release by a non-holder changes nothing,
// Renew and Advance by one fail with lock.ErrNotHeld.
//
// Obtain takes the names one after another in sorted order (one order for
// every caller, so overlapping sets cannot deadlock) and releases the leases it
// took when one is busy (all or none). Per name:
//
//  1. Get Blob Properties: ETag, lease state, metadata, Last-Modified and the
//     response's Date (the server's clock). Leased by another value and not
//     stale: lock.ErrBusy.
//  2. Leased but stale (see below): Break Lease with a break period of 0, If-Match
//     the ETag read: a renewal in between changed the ETag, so a live holder
//     wins and the break fails (busy).
//  3. Acquire Lease under the value's lease ID, If-Match the ETag read; a
//     lease present (another contender won) is busy.
//  4. Set Blob Metadata (token + block, holder, TTL) under the new lease,
//     If-Match the ETag read (lease calls do not change it).
//
// Renew writes the metadata again under the lease, If-Match the ETag of this
// holder's own last write, which moves Last-Modified to the server's time of
// the renewal, and renews the Azure lease, the two concurrently. Held reads the
// properties: leased, holder is the value's lease ID, and not stale. Release is
// Release Lease under the value's lease ID (a mismatch, a lease already gone:
// nothing to do). Advance writes token = max(token, past) + 1 under the lease,
// If-Match the ETag of the holder's last write. A Backend remembers, per
// resource it holds, the token and ETag it last wrote, and orders its own
// renewal and Advance of one resource, so a renewal never writes back a token
// older than Advance's. When its last write's answer was lost (a timeout), the
// ETag it kept is stale: on ConditionNotMet it reads the blob once and, still
// leased to it, writes on what it read (only the lease's holder can write).
//
// # The TTL
//
// Azure leases last 15 to 60 seconds (or forever); the lock.Client's TTL is
// usually shorter (the conformance suite's are 600ms and 1s). The Azure lease
// is taken for the TTL rounded up into 15s..60s (infinite above 60s), so it
// never ends before the TTL; the TTL itself is honoured by the contenders,
// which break a lease whose holder has not written (obtained or renewed) for
// its TTL. A lease is stale when either
//
//   - on the server's clock, the Date of a read minus the blob's Last-Modified
//     is at least the holder's TTL plus 1s (both headers have whole seconds,
//     so the holder surely had its TTL); or
//   - on the contender's clock, the contender has seen the same ETag since a
//     read that came back at least the TTL before its current read was sent
//     (the holder's last write came before that first read).
//
// The first frees an abandoned lease between TTL and TTL + 2s after its
// holder's last write; the second, for a waiter that was polling already,
// within the TTL plus its poll. If the holder never wrote its metadata (it
// died between acquiring the lease and writing), the Azure lease ends by
// itself after 15s..60s. A live holder renews every RenewEvery (under TTL/2),
// so it is never stale.
//
// # Fencing tokens
//
// The token of a resource is written only under the writer's lease and only
// If-Match the ETag of the state it was computed from: Obtain writes the token
// it read plus block, Advance max(token, past) + 1, a renewal the holder's own
// last token, each conditional on an ETag that any other write since would
// have changed. So, per resource, as long as the storage service keeps every
// write it acknowledged, a block reserved by Obtain lies strictly above every
// token issued before, and no two grants carry the same token; this holds
// whatever the clocks do.
//
// It fails, and a token issued afterwards can repeat one issued before, exactly
// when acknowledged writes are lost or undone:
//
//   - the blob or its container deleted (by hand, by a lifecycle rule): the
//     blob is created again with token 0;
//   - a failover of a geo-redundant account to its secondary, whose copy lags
//     (asynchronous replication), or a restore to an earlier point in time;
//   - on Azurite: a kill (or crash) of the emulator less than 5s after a write
//     (it saves its metadata to disk every 5s), or --inMemoryPersistence and a
//     restart. The conformance suite's restart test shows the token repeat.
//
// The store covers all of them: it keeps the largest token it has accepted per
// resource and refuses any token not above it; the holder then calls
// lock.Grant.Advance, which moves the blob's token above it.
//
// # Clocks
//
// Clients never send a time. The Client measures a lease's validity on its own
// monotonic clock from when it sent the Obtain or Renew (TTL - TTL/20 - 2ms
// after), which is before the write that set Last-Modified and the ETag. It
// cancels the work before a contender may break the lease unless, over a
// lease, the storage service's clock runs fast against the holder's by more
// than that margin (the first rule; or the front end that answers a read, its
// Date, is ahead of the one that stamped the write by more than the 1s allowed
// for the headers' resolution), or the contender's clock runs fast against the
// holder's by more than that margin (the second rule; as with the Redis
// backend). Then another owner can take the lease while the first still
// works, and the fencing token refuses the first owner's late writes.
//
// # Costs
//
// Round trips: Obtain 3 per name (properties, acquire, metadata), one more on
// a name's first use (create) and one more to break a stale lease; a busy name
// costs 1. Renew is 2 requests per name, all sent at once: one round trip of
// wall time. Held, Advance and Release are 1 (Release's names at once). Every
// request is a billed storage transaction, and every obtain and renewal a
// write. Azure Storage announces no releases (there is no notification a
// process could wait on), so Backend is not a lock.Notifier: a waiter in
// another process polls, every lock.Options.MinPoll doubling to MaxPoll
// (10ms..500ms by default), a Get Blob Properties each; a handoff between
// processes waits up to MaxPoll after the release. The HTTP client makes a
// single try per call (the lock.Client retries); the SDK logs nothing unless
// the process sets an azcore/log listener.
package azlease

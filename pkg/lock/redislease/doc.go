// Package redislease is the lock.Backend on one Redis: a standalone server, a
// Sentinel group or a Cluster (New; NewClient is the shortcut to a lock.Client
// on it). Importing it registers redis:// and rediss:// with lock.Open (see
// NewRedisClient for the URLs). Its Lua scripts are beside it, each in its own
// .lua file; the renewal script is shared with Redlock (package redlock), which
// lays out its keys the same way (Keys).
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
// A token counter is a hybrid clock: before a block of tokens is taken, a
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
// go-redis honours a context's deadline only with ContextTimeoutEnabled set on
// its options (NewRedisClient sets it); set it, or a stalled Redis holds calls
// until the read timeout.
package redislease

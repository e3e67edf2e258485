package redislease

import (
	_ "embed" // the Lua scripts below
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the Redis backend, each in its own .lua file beside this
// one but the renewal, which Redlock runs too (internal/redisscript).

// obtainLua leases every lock key to the caller's value, all or none, and
// issues the fencing tokens in the same round trip: when no key is held, it
// sets each with the TTL, reserves a block of tokens per resource and returns
// the top of each block; when one is held, it marks that resource as awaited
// (its waiters key, for a TTL) and returns nil. A
// counter is a hybrid clock: when it is behind the server's clock in
// microseconds (TIME), it is moved up to it before the block is added. A
// counter Redis lost (a restart without persistence, a failover to a replica
// that lagged) so comes back above the tokens it had issued; see the package
// documentation for the exact terms.
//
// The same clock lets a counter expire: one unused for a week (a resource no
// longer sold, or a name someone made up) is dropped, and comes back above its
// old value if the resource is locked again.
//
// KEYS: lock1, fence1, waiters1, lock2, ...   ARGV: value, TTL ms, block size, counter TTL ms
//
//go:embed obtain.lua
var obtainLua string

// obtainScript runs obtain.lua (EVALSHA, falling back to EVAL).
var obtainScript = redis.NewScript(obtainLua)

// fenceTTL is how long an unused fence counter lives.
const fenceTTL = 7 * 24 * time.Hour

// The renewal script is Redlock's too: internal/redisscript.Renew.

// advanceLua moves one resource's counter above a token the store has already
// accepted, for the current holder only, and returns the new token: the largest
// of the counter, the server's clock in microseconds and the accepted token, plus
// one.
//
// KEYS: lock, fence   ARGV: value, accepted token, counter TTL ms
//
//go:embed advance.lua
var advanceLua string

// advanceScript runs advance.lua (EVALSHA, falling back to EVAL).
var advanceScript = redis.NewScript(advanceLua)

// releaseLua deletes the lock keys that still hold the caller's value and
// announces on the namespace's channel the release of each that was awaited
// (its waiters key set, and deleted now), in one round trip. A key that holds
// another value belongs to someone else and is left alone.
//
// KEYS: lock1, waiters1, lock2, waiters2, ...   ARGV: value, channel, names (one per lock)
//
//go:embed release.lua
var releaseLua string

// releaseScript runs release.lua (EVALSHA, falling back to EVAL).
var releaseScript = redis.NewScript(releaseLua)

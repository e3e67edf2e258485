package lock

import (
	_ "embed" // the Lua scripts below
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts the package runs, each in its own .lua file beside this one.

// fenceLua issues fencing tokens to the current holder only: it checks that every
// lock key still holds the caller's value, then reserves a block of tokens per
// resource with INCRBY and returns the top of each block. A counter that does not
// exist (first use, or Redis restarted without persistence) is seeded from the
// server's clock in microseconds, so tokens issued after a restart are larger than
// those issued before it as long as fewer than a million tokens per second were
// taken for that resource.
//
// The same seeding lets a counter expire: one unused for a week (a resource no
// longer sold, or a name someone made up) is dropped, and comes back above its
// old value if the resource is locked again.
//
// KEYS: lock1, fence1, lock2, fence2, ...   ARGV: value, block size, counter TTL ms
//
//go:embed fence.lua
var fenceLua string

// fenceScript runs fence.lua (EVALSHA, falling back to EVAL).
var fenceScript = redis.NewScript(fenceLua)

// fenceTTL is how long an unused fence counter lives.
const fenceTTL = 7 * 24 * time.Hour

// releaseLua deletes the lock keys that still hold the caller's value and
// announces each release on the namespace's channel, in one round trip. A key that
// holds another value belongs to someone else and is left alone.
//
// KEYS: lock keys   ARGV: value, channel, names (one per key)
//
//go:embed release.lua
var releaseLua string

// releaseScript runs release.lua (EVALSHA, falling back to EVAL).
var releaseScript = redis.NewScript(releaseLua)

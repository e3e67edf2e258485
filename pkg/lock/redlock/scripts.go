package redlock

import (
	_ "embed" // the Lua scripts below
	"time"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts run on each node, each in its own .lua file beside this one.
// Each acts on one node only; the quorum is counted in Go.

// obtainLua is phase 1 of an obtain on one node: when no lock key of the call
// is held by another value, it sets every one to the caller's value with the
// TTL and returns, per resource, the node's counter moved up to the node's
// clock (TIME, in microseconds) if it is behind; it writes no counter. When one
// is held by another value it sets that resource's waiters mark (for a TTL),
// sets nothing and returns nil. All the names of the call or none.
//
// KEYS: lock1, fence1, waiters1, lock2, ...   ARGV: value, TTL ms
//
//go:embed obtain.lua
var obtainLua string

// obtainScript runs obtain.lua (EVALSHA, falling back to EVAL).
var obtainScript = redis.NewScript(obtainLua)

// raiseLua is phase 2 of an obtain, and of an advance, on one node: when every
// lock key still holds the caller's value, it raises each resource's counter to
// the given top (a counter already above it is left) and returns 1; otherwise
// it changes nothing and returns 0.
//
// KEYS: lock1, fence1, lock2, fence2, ...   ARGV: value, counter TTL ms, top1, top2, ...
//
//go:embed raise.lua
var raiseLua string

// raiseScript runs raise.lua (EVALSHA, falling back to EVAL).
var raiseScript = redis.NewScript(raiseLua)

// peekLua is phase 1 of an advance on one node: when the lock holds the
// caller's value, it returns the node's counter moved up to the node's clock in
// microseconds (writing nothing); otherwise nil.
//
// KEYS: lock, fence   ARGV: value
//
//go:embed peek.lua
var peekLua string

// peekScript runs peek.lua (EVALSHA, falling back to EVAL).
var peekScript = redis.NewScript(peekLua)

// releaseLua deletes the lock keys that still hold the caller's value and
// announces on the namespace's channel the release of each that was awaited
// (its waiters mark set, and deleted now). A key that holds another value is
// left alone.
//
// KEYS: lock1, waiters1, lock2, waiters2, ...   ARGV: value, channel, names (one per lock)
//
//go:embed release.lua
var releaseLua string

// releaseScript runs release.lua (EVALSHA, falling back to EVAL).
var releaseScript = redis.NewScript(releaseLua)

// counterTTL is how long an unused counter lives on a node: a week, as with
// the Redis backend. A counter that expired comes back at the node's clock,
// above its old value unless it had run ahead of the clock.
const counterTTL = 7 * 24 * time.Hour

package lock

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// fenceScript issues fencing tokens to the current holder only: it checks that every
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
var fenceScript = redis.NewScript(`
for i = 1, #KEYS, 2 do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return false end
end
local block = tonumber(ARGV[2])
local tops = {}
for i = 2, #KEYS, 2 do
  local n = redis.call('incrby', KEYS[i], block)
  if n == block then
    local t = redis.call('time')
    n = redis.call('incrby', KEYS[i], t[1] .. string.format('%06d', tonumber(t[2])))
  end
  redis.call('pexpire', KEYS[i], ARGV[3])
  tops[#tops + 1] = n
end
return tops
`)

// fenceTTL is how long an unused fence counter lives.
const fenceTTL = 7 * 24 * time.Hour

// releaseScript deletes the lock keys that still hold the caller's value and
// announces each release on the namespace's channel, in one round trip. A key that
// holds another value belongs to someone else and is left alone.
//
// KEYS: lock keys   ARGV: value, channel, names (one per key)
var releaseScript = redis.NewScript(`
local n = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    redis.call('publish', ARGV[2], ARGV[2 + i])
    n = n + 1
  end
end
return n
`)

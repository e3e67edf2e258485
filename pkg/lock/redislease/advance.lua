if redis.call('get', KEYS[1]) ~= ARGV[1] then return false end
local t = redis.call('time')
local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = tonumber(redis.call('get', KEYS[2]) or '0')
local past = tonumber(ARGV[2])
if cur > n then n = cur end
if past > n then n = past end
n = n + 1
redis.call('set', KEYS[2], string.format('%.0f', n), 'px', ARGV[3])
return n

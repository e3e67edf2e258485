if redis.call('get', KEYS[1]) ~= ARGV[1] then return false end
local t = redis.call('time')
local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cur = tonumber(redis.call('get', KEYS[2]) or '0')
if cur > n then n = cur end
return n

local busy = false
for i = 1, #KEYS, 3 do
  local v = redis.call('get', KEYS[i])
  if v and v ~= ARGV[1] then
    redis.call('set', KEYS[i + 2], '1', 'px', ARGV[2])
    busy = true
  end
end
if busy then return false end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local counters = {}
for i = 1, #KEYS, 3 do
  redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
  local n = tonumber(redis.call('get', KEYS[i + 1]) or '0')
  if n < now then n = now end
  counters[#counters + 1] = n
end
return counters

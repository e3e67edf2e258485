if #KEYS == 3 then
  if not redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
    redis.call('set', KEYS[3], '1', 'px', ARGV[2])
    return false
  end
else
  local busy = false
  for i = 1, #KEYS, 3 do
    if redis.call('exists', KEYS[i]) == 1 then
      redis.call('set', KEYS[i + 2], '1', 'px', ARGV[2])
      busy = true
    end
  end
  if busy then return false end
  for i = 1, #KEYS, 3 do
    redis.call('set', KEYS[i], ARGV[1], 'px', ARGV[2])
  end
end
local block = tonumber(ARGV[3])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tops = {}
for i = 2, #KEYS, 3 do
  local n = tonumber(redis.call('get', KEYS[i]) or '0')
  if n < now then n = now end
  n = n + block
  redis.call('set', KEYS[i], string.format('%.0f', n), 'px', ARGV[4])
  tops[#tops + 1] = n
end
return tops

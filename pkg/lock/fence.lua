for i = 1, #KEYS, 2 do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return false end
end
local block = tonumber(ARGV[2])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tops = {}
for i = 2, #KEYS, 2 do
  local n = tonumber(redis.call('get', KEYS[i]) or '0')
  if n < now then n = now end
  n = n + block
  redis.call('set', KEYS[i], string.format('%.0f', n), 'px', ARGV[3])
  tops[#tops + 1] = n
end
return tops

for i = 1, #KEYS, 2 do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then return 0 end
end
for i = 1, #KEYS, 2 do
  local top = tonumber(ARGV[2 + (i + 1) / 2])
  local n = tonumber(redis.call('get', KEYS[i + 1]) or '0')
  if n < top then n = top end
  redis.call('set', KEYS[i + 1], string.format('%.0f', n), 'px', ARGV[2])
end
return 1

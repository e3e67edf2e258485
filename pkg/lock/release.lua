local n = 0
for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    redis.call('publish', ARGV[2], ARGV[2 + i])
    n = n + 1
  end
end
return n

local n = 0
for i = 1, #KEYS, 2 do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    if redis.call('del', KEYS[i], KEYS[i + 1]) == 2 then
      redis.call('publish', ARGV[2], ARGV[2 + (i + 1) / 2])
    end
    n = n + 1
  end
end
return n

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

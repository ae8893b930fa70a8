-- A tag's estimate in each bucket of a window, in one round trip (serving/store.py, single server only: the
-- buckets' keys lie in different slots of a cluster). KEYS: per bucket its sketch (cms:*) then its N
-- (total:*); ARGV: the tag's cell indexes. Returns per bucket: the least of its cells (u32, BITFIELD_RO),
-- then N (0 when missing), the same values as the pipeline of a BITFIELD_RO and a GET a bucket.
local fields = {}
for j = 1, #ARGV do
  fields[#fields + 1] = 'GET'
  fields[#fields + 1] = 'u32'
  fields[#fields + 1] = '#' .. ARGV[j]
end
local out = {}
for i = 1, #KEYS, 2 do
  local cells = redis.call('BITFIELD_RO', KEYS[i], unpack(fields))
  local least = cells[1]
  for j = 2, #cells do
    if cells[j] < least then least = cells[j] end
  end
  out[#out + 1] = least
  out[#out + 1] = redis.call('GET', KEYS[i + 1]) or '0'
end
return out

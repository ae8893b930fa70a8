-- One partition's checkpoint (speed.state=partition, issue #24): its changed state keys and its next
-- offset in one atomic step. Every key is declared in KEYS and carries the partition's hash tag {p<N>}:
-- the step is one slot, on a Redis Cluster too. Built by speed/checkpoint.py (CheckpointPayload).
--
-- KEYS_FIELDS: offset_key index_key changed_key
--   then `writes` keys to write, then the keys to delete.
-- ARGV_FIELDS: start fresh next_offset now_s writes
--   then (value, expire at epoch s) per key written.
--
-- Returns {'OK'} | {'STALE', stored offset} (another owner moved on, or wrote first while this one
-- started fresh: nothing written) |
-- {'LOST'} (no stored offset although the worker loaded one: Redis lost the partition's keys).
local offset_key, index_key, changed_key = KEYS[1], KEYS[2], KEYS[3]
local start, fresh, next_offset, now_s, writes = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local stored = redis.call('GET', offset_key)
if stored then
  -- a fresh owner found no offset when it loaded: one stored since means another owner wrote first
  if stored ~= start or fresh == '1' then return {'STALE', stored} end
elseif fresh ~= '1' then
  return {'LOST'}
end
for i = 1, writes do
  local key, expire_at = KEYS[3 + i], ARGV[5 + 2 * i]
  redis.call('SET', key, ARGV[4 + 2 * i], 'EXAT', expire_at)
  redis.call('ZADD', index_key, expire_at, key)
  redis.call('SADD', changed_key, key)
end
for i = 4 + writes, #KEYS do
  redis.call('DEL', KEYS[i])
  redis.call('ZREM', index_key, KEYS[i])
  redis.call('SADD', changed_key, KEYS[i])
end
-- the index forgets names whose keys expired; the changed set lives a day without a merger
redis.call('ZREMRANGEBYSCORE', index_key, '-inf', now_s)
redis.call('EXPIRE', changed_key, 86400)
redis.call('SET', offset_key, next_offset)
return {'OK'}

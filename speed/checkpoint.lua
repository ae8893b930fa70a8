-- One partition's checkpoint (issue #24): its changed state keys and its next
-- offset in one atomic step, with (`pair`) the next offset of the same partition of the engagements topic,
-- whose engagements changed the state's top-post lists. Every key is declared in KEYS and carries the
-- partition's hash tag {p<N>}: the step is one slot, on a Redis Cluster too. Built by speed/checkpoint.py
-- (CheckpointPayload).
--
-- KEYS_FIELDS: offset_key index_key changed_key pair_offset_key replay_key pair_replay_key
--   then `writes` keys to write, then the keys to delete.
-- ARGV_FIELDS: start fresh next_offset now_s pair pair_start pair_fresh pair_next_offset replay pair_replay replay_ttl_s writes
--   then (value, expire at epoch s) per key written; expire at 0: the value is appended to the key.
-- `replay` (`pair_replay`): the partition's rebuilding marker (speed/replay.py), set at `replay_key` with
-- `replay_ttl_s`, or empty: the marker is deleted (not rebuilding, or this step reaches the replay's target).
--
-- Returns {'OK'} | {'STALE', stored offset} (another owner moved on, or wrote first while this one
-- started fresh: nothing written) |
-- {'LOST'} (no stored offset although the worker loaded one: Redis lost the partition's keys).
local offset_key, index_key, changed_key, pair_offset_key, replay_key, pair_replay_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local start, fresh, next_offset, now_s, pair, pair_start, pair_fresh, pair_next_offset, replay, pair_replay, replay_ttl_s, writes = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local function check(key, expected, was_fresh)
  local stored = redis.call('GET', key)
  if stored then
    -- a fresh owner found no offset when it loaded: one stored since means another owner wrote first
    if stored ~= expected or was_fresh == '1' then return {'STALE', stored} end
  elseif was_fresh ~= '1' then
    return {'LOST'}
  end
  return nil
end
local refused = check(offset_key, start, fresh)
if refused then return refused end
if pair == '1' then
  refused = check(pair_offset_key, pair_start, pair_fresh)
  if refused then return refused end
end
-- the index and the changed set take their members a slice at a time (one call each, not one per key;
-- unpack's limit is about 8,000 values)
local function in_slices(command, key, members)
  for i = 1, #members, 2000 do
    redis.call(command, key, unpack(members, i, math.min(i + 1999, #members)))
  end
end
local indexed, changed, deleted = {}, {}, {}
for i = 1, writes do
  local key, expire_at = KEYS[6 + i], ARGV[12 + 2 * i]
  if expire_at == '0' then
    -- a chunk of changed cells (trendcore/sketch_blob.py), appended: the key keeps its expiry and its index
    -- entry; a key that expired meanwhile takes nothing (its bucket is no longer kept)
    if redis.call('EXISTS', key) == 1 then redis.call('APPEND', key, ARGV[11 + 2 * i]) end
  else
    redis.call('SET', key, ARGV[11 + 2 * i], 'EXAT', expire_at)
    indexed[#indexed + 1] = expire_at
    indexed[#indexed + 1] = key
  end
  changed[#changed + 1] = key
end
for i = 7 + writes, #KEYS do
  redis.call('DEL', KEYS[i])
  deleted[#deleted + 1] = KEYS[i]
  changed[#changed + 1] = KEYS[i]
end
in_slices('ZADD', index_key, indexed)
in_slices('ZREM', index_key, deleted)
in_slices('SADD', changed_key, changed)
-- the index forgets names whose keys expired; the changed set lives a day without a merger
redis.call('ZREMRANGEBYSCORE', index_key, '-inf', now_s)
redis.call('EXPIRE', changed_key, 86400)
redis.call('SET', offset_key, next_offset)
if pair == '1' then redis.call('SET', pair_offset_key, pair_next_offset) end
local function mark(key, value)
  if value == '' then redis.call('DEL', key) else redis.call('SET', key, value, 'EX', replay_ttl_s) end
end
mark(replay_key, replay)
if pair == '1' then mark(pair_replay_key, pair_replay) end
return {'OK'}

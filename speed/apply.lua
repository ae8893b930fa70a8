-- One partition micro-batch, applied atomically (Redis runs a script to the end, alone).
-- ARGV[1] = JSON payload built by speed/writer.py.
-- Returns {'OK', orphans} | {'STALE', stored} | {'DUP', post keys...} | {'LOST'}.
local p = cjson.decode(ARGV[1])
if redis.call('GET', p.ek) ~= p.ev then return {'LOST'} end
local stored = redis.call('GET', p.ok)
if stored and stored ~= p.s then return {'STALE', stored} end
-- duplicates (a post hash exists: applied before) make the worker re-aggregate without them
local dups = {}
for _, h in ipairs(p.ph) do
  if redis.call('EXISTS', h[1]) == 1 then dups[#dups + 1] = h[1] end
end
-- at most 4,000 named (Lua's unpack limit is about 8,000): the worker leaves them out and asks again
if #dups > 0 then return {'DUP', unpack(dups, 1, math.min(#dups, 4000))} end

local d, tags, tc = p.d, p.tg, p.tc

local function zadd_chunked(key, flat)
  for i = 1, #flat, 4000 do
    redis.call('ZADD', key, unpack(flat, i, math.min(i + 3999, #flat)))
  end
end

-- The k-th largest of the numbers in `xs` (a copy is partitioned: Hoare's quickselect, linear on average).
local function kth_largest(xs, k)
  local a, lo, hi = {}, 1, #xs
  for i = 1, hi do a[i] = xs[i] end
  local want = #xs - k + 1  -- its rank in ascending order
  while lo < hi do
    local pivot, i, j = a[math.floor((lo + hi) / 2)], lo, hi
    while i <= j do
      while a[i] < pivot do i = i + 1 end
      while a[j] > pivot do j = j - 1 end
      if i <= j then a[i], a[j] = a[j], a[i]; i = i + 1; j = j - 1 end
    end
    if want <= j then hi = j elseif want >= i then lo = i else break end
  end
  return a[want]
end

-- One BITFIELD argument list, reused: 'INCRBY u32' stays, each cell fills its offset and amount.
-- Offsets ('#' .. cell) and amounts as strings are made once per step: the same cells and small
-- amounts recur in every sketch (Redis would format each Lua number argument with snprintf).
local args, offs, strs = {'OVERFLOW', 'SAT'}, {}, {}
for i = 0, 1499 do args[3 + 4 * i] = 'INCRBY'; args[4 + 4 * i] = 'u32' end
-- cell -> value after this batch, one table for the whole step (cell + 1: its array part, filled
-- once): a sketch only reads cells of its own tags, all of which it has just written
local final = {}
if #p.sk > 0 then for i = 1, p.nb / 4 do final[i] = 0 end end

-- tg/tc: the step's tags and their cells (`d` per tag, flat). sk rows: key, total key, candidates
-- key, expire at, total increment, the sketch's tags (0-based into tg), then its distinct cells and
-- the increment summed per cell.
for _, s in ipairs(p.sk) do
  local key, tagidx, ids, amounts = s[1], s[6], s[7], s[8]
  if redis.call('EXISTS', key) == 0 then
    -- full size at once (a string grown by BITFIELD gets doubled allocations: 2x memory), zeroed
    -- by Redis itself (cheaper than building the zeros in Lua)
    redis.call('SETRANGE', key, p.nb - 1, '\0')
  end
  for first = 1, #ids, 1500 do  -- 4 args a cell stays under Lua's unpack limit
    local last, n = math.min(first + 1499, #ids), 2
    for i = first, last do
      local id = ids[i]
      local off = offs[id]
      if not off then off = '#' .. id; offs[id] = off end
      local a = amounts[i]
      local as = strs[a]
      if not as then as = string.format('%d', a); strs[a] = as end
      args[n + 3] = off; args[n + 4] = as
      n = n + 4
    end
    local got = redis.call('BITFIELD', key, unpack(args, 1, n))
    for i = 1, #got do final[ids[first + i - 1] + 1] = got[i] end
  end
  -- a full candidate set only admits tags above its lowest score
  local floor = -1
  if redis.call('ZCARD', s[3]) >= p.cs then
    floor = tonumber(redis.call('ZRANGE', s[3], 0, 0, 'WITHSCORES')[2])
  end
  local ests, who = {}, {}
  for _, t in ipairs(tagidx) do
    local base = t * d
    local est = final[tc[base + 1] + 1]
    for r = 2, d do
      local v = final[tc[base + r] + 1]
      if v < est then est = v end
    end
    if est > floor then ests[#ests + 1] = est; who[#who + 1] = t end
  end
  -- of more than cs new estimates only the cs highest can survive the trim below (estimates only
  -- grow): sending the rest to ZADD costs more than selecting them
  local least = #ests > p.cs and kth_largest(ests, p.cs) or floor
  local cand = {}
  for i, est in ipairs(ests) do
    if est >= least then
      local es = strs[est]  -- as a string here: Redis would format a Lua number with '%.17g'
      if not es then es = string.format('%d', est); strs[est] = es end
      cand[#cand + 1] = es; cand[#cand + 1] = tags[who[i] + 1]
    end
  end
  if #cand > 0 then zadd_chunked(s[3], cand) end
  redis.call('ZREMRANGEBYRANK', s[3], 0, -(p.cs + 1))
  redis.call('INCRBY', s[2], s[5])
  redis.call('EXPIREAT', key, s[4]); redis.call('EXPIREAT', s[2], s[4]); redis.call('EXPIREAT', s[3], s[4])
end

for _, h in ipairs(p.ph) do
  redis.call('HSET', h[1], unpack(h[3])); redis.call('EXPIRE', h[1], h[2])
end
for _, h in ipairs(p.hll) do
  local users = h[3]
  for i = 1, #users, 4000 do redis.call('PFADD', h[1], unpack(users, i, math.min(i + 3999, #users))) end
  redis.call('EXPIREAT', h[1], h[2])
end
for _, z in ipairs(p.np) do
  zadd_chunked(z[1], z[3])
  redis.call('ZREMRANGEBYRANK', z[1], 0, -(p.pt + 1)); redis.call('EXPIREAT', z[1], z[2])
end
for _, h in ipairs(p.dp) do
  local kv = h[3]
  for i = 1, #kv, 2 do redis.call('HSETNX', h[1], kv[i], kv[i + 1]) end
  redis.call('EXPIREAT', h[1], h[2])
end

local orphans, touched = 0, {}
-- en rows: post key, post id, weight of the engagements without event_id, {event_id, weight, ...}: an
-- event_id adds its weight only the first time (a field 'e:<id>' in the post's hash, gone with it)
for _, e in ipairs(p.en) do
  local row = redis.call('HMGET', e[1], 'top', 'exp')
  if row[1] then
    local weight, ids = e[3], e[4]
    if #ids > 0 then
      local w = tonumber(weight)
      for i = 1, #ids, 2 do
        if redis.call('HSETNX', e[1], 'e:' .. ids[i], '1') == 1 then w = w + tonumber(ids[i + 1]) end
      end
      weight = string.format('%.17g', w)
    end
    for k in string.gmatch(row[1], '[^\n]+') do
      redis.call('ZINCRBY', k, weight, e[2])
      touched[k] = row[2]
    end
  else
    orphans = orphans + 1
  end
end
for k, exp in pairs(touched) do
  redis.call('ZREMRANGEBYRANK', k, 0, -(p.pt + 1)); redis.call('EXPIREAT', k, exp)
end

redis.call('SET', p.ok, p.n)
return {'OK', orphans}

"""Prototype for issue #24: a checkpoint whose tag-hour keys are fields of one hash a (family, hour), measured
against today's checkpoint step on the same payloads.

Run: .venv/bin/python bench/proto_tag_hashes.py --redis redis://127.0.0.1:28079/15 --history-posts 100000

Today each (tag, hour) of a partition's author sketches (`hll`), newest posts (`new`) and top posts (`top`) is
its own key: a SET with EXAT, a member of the partition's index and of its changed set, written whole each
checkpoint that touched it. The prototype writes them as fields of `part:{p}:<family>s:h:<hour>` (HSET a
slice at a time, one EXPIREAT a hash, HDEL for the deletes): the index holds the hashes, the changed set
one short member a field (what the merger needs to know). Buckets and seen-id chunks stay as they are. Only
the step's Redis side is measured (the worker's state, the merger and the loader are not changed here).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: the checkout's packages

from bench.checkpoint_bench import payloads, report, run  # noqa: E402
from speed.checkpoint import ARGV_FIELDS, KEYS_FIELDS, SCRIPT_PATH, CheckpointPayload  # noqa: E402
from trendcore.keys import KeySpace  # noqa: E402
from trendcore.settings import Settings  # noqa: E402

TAG_HOUR = ("hll", "new", "top")

PROTO = r"""
local offset_key, index_key, changed_key = KEYS[1], KEYS[2], KEYS[3]
local start, fresh, next_offset, now_s = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local plain, plain_deletes, hashes = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local stored = redis.call('GET', offset_key)
if stored then
  if stored ~= start or fresh == '1' then return {'STALE', stored} end
elseif fresh ~= '1' then return {'LOST'} end
local function in_slices(command, key, members)
  for i = 1, #members, 2000 do
    redis.call(command, key, unpack(members, i, math.min(i + 1999, #members)))
  end
end
local indexed, changed, deleted = {}, {}, {}
local a = 15
for i = 1, plain do
  local key, expire_at = KEYS[6 + i], ARGV[a + 1]
  redis.call('SET', key, ARGV[a], 'EXAT', expire_at)
  indexed[#indexed + 1] = expire_at
  indexed[#indexed + 1] = key
  changed[#changed + 1] = key
  a = a + 2
end
for i = 7 + plain, 6 + plain + plain_deletes do
  redis.call('DEL', KEYS[i])
  deleted[#deleted + 1] = KEYS[i]
  changed[#changed + 1] = KEYS[i]
end
local k = 7 + plain + plain_deletes
for h = 1, hashes do
  local key, expire_at, sets, dels = KEYS[k], ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local fields = {}
  for i = 0, sets - 1 do
    fields[#fields + 1] = ARGV[a + 2 * i]
    fields[#fields + 1] = ARGV[a + 2 * i + 1]
    changed[#changed + 1] = ARGV[a + 2 * i] .. '@' .. key
  end
  a = a + 2 * sets
  if sets > 0 then in_slices('HSET', key, fields) end
  local gone = {}
  for i = 0, dels - 1 do
    gone[#gone + 1] = ARGV[a + i]
    changed[#changed + 1] = ARGV[a + i] .. '@' .. key
  end
  a = a + dels
  if dels > 0 then in_slices('HDEL', key, gone) end
  redis.call('EXPIREAT', key, expire_at)
  indexed[#indexed + 1] = expire_at
  indexed[#indexed + 1] = key
  k = k + 1
end
in_slices('ZADD', index_key, indexed)
in_slices('ZREM', index_key, deleted)
in_slices('SADD', changed_key, changed)
redis.call('ZREMRANGEBYSCORE', index_key, '-inf', now_s)
redis.call('EXPIRE', changed_key, 86400)
redis.call('SET', offset_key, next_offset)
return {'OK'}
"""


class Proto:
    """A payload laid out for PROTO: the same control keys and ARGV head, the plain writes and deletes, then one
    (expire at, fields set, fields deleted) group a (family, hour) hash. Enough of CheckpointPayload's surface
    for checkpoint_bench.run (keys() and args())."""

    def __init__(self, payload: CheckpointPayload, keys: KeySpace) -> None:
        plain = [e for e in payload.entries if keys.parse_part(e.key)[1] not in TAG_HOUR]
        plain_deletes = [k for k in payload.deletes if keys.parse_part(k)[1] not in TAG_HOUR]
        groups: dict[str, list] = {}
        for entry in payload.entries:
            p, kind, coords = keys.parse_part(entry.key)
            if kind in TAG_HOUR:
                group = groups.setdefault(self.hash_key(keys, p, kind, coords[1]), [entry.expire_at_s, [], []])
                group[1] += [coords[0], entry.value]
        for key in payload.deletes:
            p, kind, coords = keys.parse_part(key)
            if kind in TAG_HOUR:
                groups.setdefault(self.hash_key(keys, p, kind, coords[1]), [0, [], []])[2].append(coords[0])
        head = [int(v) if isinstance(v, bool) else v for v in (getattr(payload, n) for n in ARGV_FIELDS)]
        head[-1] = len(plain)
        self._keys = [*(getattr(payload, n) for n in KEYS_FIELDS), *(e.key for e in plain), *plain_deletes,
                      *groups]
        self._args = [*head, len(plain_deletes), len(groups), *(x for e in plain for x in (e.value, e.expire_at_s))]
        for expire_at, sets, dels in groups.values():
            self._args += [expire_at, len(sets) // 2, len(dels), *sets, *dels]

    @staticmethod
    def hash_key(keys: KeySpace, partition: int, kind: str, hour: int) -> str:
        """`part:{p}:<family>s:h:<hour>`, in the partition's slot."""
        return keys.part_match(partition)[:-1] + f"{kind}s:h:{hour}"

    def keys(self) -> list[str]:
        return self._keys

    def args(self) -> list:
        return self._args


def check(client: redis.Redis, keys: KeySpace, first, made: list[CheckpointPayload], proto_first, proto) -> None:
    """The prototype's hashes hold what today's keys hold after the same steps (each tag-hour's last value;
    none for a deleted one): SystemExit otherwise."""
    run(client, PROTO, proto_first, proto)  # type: ignore[arg-type]
    last: dict[tuple[str, str], bytes | None] = {}
    for payload in ([first] if first is not None else []) + made:
        for entry in payload.entries:
            p, kind, coords = keys.parse_part(entry.key)
            if kind in TAG_HOUR:
                last[(Proto.hash_key(keys, p, kind, coords[1]), coords[0])] = entry.value
        for key in payload.deletes:
            p, kind, coords = keys.parse_part(key)
            if kind in TAG_HOUR:
                last[(Proto.hash_key(keys, p, kind, coords[1]), coords[0])] = None
    wrong = [f for f, value in last.items() if client.hget(*f) != value]
    if wrong:
        raise SystemExit(f"the prototype's hashes differ from today's keys in {len(wrong)} of {len(last)} fields")
    print(f"checked: the prototype's hashes hold each of {len(last):,} tag-hours as today's keys do")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15", help="a database this bench may flush")
    parser.add_argument("--rate", type=int, default=3750)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--history-posts", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = Settings()
    keys = KeySpace.of(settings)
    first, made, posts = payloads(settings, args.rate, args.seconds, args.history_posts)
    proto_first = Proto(first, keys) if first is not None else None
    proto = [Proto(p, keys) for p in made]
    print(f"{len(made)} checkpoints; keys a checkpoint: today {sum(len(p.keys()) for p in made) / len(made):,.0f}, "
          f"prototype {sum(len(p.keys()) for p in proto) / len(proto):,.0f}")
    client = redis.Redis.from_url(args.redis)
    today = SCRIPT_PATH.read_text()
    found: dict[str, list] = {"today": [], "tag hashes": []}
    for _ in range(args.rounds):
        found["today"].append(run(client, today, first, made))
        found["tag hashes"].append(run(client, PROTO, proto_first, proto))  # type: ignore[arg-type]
    check(client, keys, first, made, proto_first, proto)
    client.flushdb()
    base = report("today", found["today"], posts, len(made))
    cpu = report("tag hashes", found["tag hashes"], posts, len(made))
    print(f"tag hashes / today: {cpu / base:.2f}")


if __name__ == "__main__":
    main()

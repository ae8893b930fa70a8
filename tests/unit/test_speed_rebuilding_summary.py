"""The merger's `rebuilding` summary (speed/merger.py `record_rebuilding`), on a dict standing in for Redis."""

from __future__ import annotations

from speed.merger import Merger
from speed.replay import Replay, marker
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.snapshot import Rebuilding

KEYS = KeySpace("t:")


class DictRedis:
    """GET/SET/DELETE on a dict, pipelined GETs that name one key each (as on a cluster), and the set's TTLs."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.ttl: dict[str, int] = {}
        self.queued: list[str] = []

    def register_script(self, _source):
        return None

    def pipeline(self, transaction: bool = True):
        self.queued = []
        return self

    def get(self, key: str) -> None:
        self.queued.append(key)

    def execute(self) -> list[bytes | None]:
        return [self.values.get(k) for k in self.queued]

    def set(self, key: str, value, ex: int) -> None:
        self.values[key], self.ttl[key] = value.encode() if isinstance(value, str) else value, ex

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def _merger(client: DictRedis) -> Merger:
    settings = Settings().model_copy(update={"redis": Settings().redis.model_copy(update={"key_prefix": "t:"})})
    return Merger(client, KEYS, settings)


def test_the_summary_sums_every_partitions_markers_and_goes_when_none_replays():
    client = DictRedis()
    merger = _merger(client)
    posts, eng = merger.topics
    client.values[KEYS.part_replay(0, posts)] = marker(posts, 0, Replay(100, 200), 150)
    client.values[KEYS.part_replay(2, eng)] = marker(eng, 2, Replay(0, 300), 0)
    found = merger.record_rebuilding()
    assert [(p.topic, p.partition) for p in found.partitions] == sorted([(posts, 0), (eng, 2)])
    assert found.progress == 50 / 400
    stored = Rebuilding.model_validate_json(client.values[KEYS.rebuilding])
    assert stored == found and client.ttl[KEYS.rebuilding] == merger.flag_ttl_s
    del client.values[KEYS.part_replay(0, posts)], client.values[KEYS.part_replay(2, eng)]
    assert merger.record_rebuilding() is None and KEYS.rebuilding not in client.values

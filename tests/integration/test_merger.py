"""The merger (speed/merger.py) against a real Redis: a change it took is merged even when that run failed.

Partition state is written by the real checkpoint step (speed/checkpoint.lua through PartitionStore), with
payloads built here so the test chooses exactly which keys a checkpoint writes or deletes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from adapters import redis as redis_io
from speed.checkpoint import CheckpointPayload
from speed.merger import Merger
from speed.partition_store import PartitionStore
from speed.state import APPEND, Entry
from trendcore import sketch_blob
from trendcore.hll import HyperLogLog
from trendcore.keys import KeySpace
from trendcore.settings import Settings
from trendcore.windows import hour_of

pytestmark = pytest.mark.integration


@pytest.fixture
def own(stack: Settings) -> Iterator[Settings]:
    """The session's Redis under a key prefix of its own, one partition a topic."""
    settings = stack.model_copy(update={
        "redis": stack.redis.model_copy(update={"key_prefix": f"m{uuid.uuid4().hex[:8]}:"}),
        "kafka": stack.kafka.model_copy(update={"partitions": 1}),
    })
    yield settings
    client, keys = redis_io.client(settings.redis), KeySpace.of(settings)
    for name in client.scan_iter(match=keys.match("*")):
        client.delete(name)
    client.close()


def _checkpoint(keys: KeySpace, start: int, writes: tuple[Entry, ...] = (), deletes: tuple[str, ...] = ()
                ) -> CheckpointPayload:
    """Partition 0's posts checkpoint from `start` to `start + 1`, writing and deleting exactly these keys."""
    return CheckpointPayload(
        offset_key=keys.part_offset(0, "posts"), index_key=keys.part_index(0), changed_key=keys.part_changed(0),
        pair_offset_key=keys.part_offset(0, "posts"), replay_key=keys.part_replay(0, "posts"),
        pair_replay_key=keys.part_replay(0, "posts"), start=start, fresh=start == 0, next_offset=start + 1,
        now_s=int(time.time()), pair=False, pair_start=0, pair_fresh=False, pair_next_offset=0, replay=b"",
        pair_replay=b"", replay_ttl_s=60, entries=writes, deletes=deletes)


class _FailsOnce(Merger):
    """A merger whose author merge fails once, after the run took the partitions' changes."""

    failed = False

    def _merge_authors(self, authors):
        if not self.failed:
            self.failed = True
            raise RuntimeError("the merge failed after its take")
        return super()._merge_authors(authors)


def test_a_deletion_taken_by_a_failed_merge_is_merged_by_the_next(own: Settings):
    client, keys = redis_io.client(own.redis), KeySpace.of(own)
    store, hour = PartitionStore(client, keys, ("posts",)), hour_of(int(time.time() * 1000))
    sketch = HyperLogLog()
    sketch.add(["u1", "u2", "u3"])
    part, merged = keys.part_authors(0, "gone", hour), keys.merged_authors("gone", hour)
    store.submit(_checkpoint(keys, 0, writes=(Entry(part, sketch.to_bytes(), int(time.time()) + 3600),)))
    merger = _FailsOnce(client, keys, own)
    merger.failed = True  # this first run succeeds
    merger.run(int(time.time() * 1000))
    assert round(HyperLogLog.from_bytes(client.get(merged)).estimate()) == 3

    store.submit(_checkpoint(keys, 1, deletes=(part,)))  # the tag left the partition's candidates
    merger.failed = False
    with pytest.raises(RuntimeError):
        merger.run(int(time.time() * 1000))
    assert client.get(merged) is not None  # not merged yet: the run failed after taking the deletion
    merger.run(int(time.time() * 1000))
    assert client.get(merged) is None
    assert client.scard(keys.part_changed(0)) == 0 and not client.exists(keys.part_taking(0))
    client.close()



def test_a_checkpoint_of_thousands_of_keys_indexes_and_notes_each(own: Settings):
    """The step adds its keys to the index and the changed set a slice at a time (unpack's limit is about 8,000
    values): every key of a step larger than a slice is indexed, noted changed, and a deletion unindexed."""
    client, keys = redis_io.client(own.redis), KeySpace.of(own)
    store, hour, expire_at = PartitionStore(client, keys, ("posts",)), hour_of(int(time.time() * 1000)), \
        int(time.time()) + 3600
    names = [keys.part_new_posts(0, f"t{i}", hour) for i in range(4_500)]
    store.submit(_checkpoint(keys, 0, writes=tuple(Entry(n, b"[]", expire_at) for n in names)))
    assert client.zcard(keys.part_index(0)) == 4_500 and client.scard(keys.part_changed(0)) == 4_500
    assert client.zscore(keys.part_index(0), names[-1]) == expire_at
    store.submit(_checkpoint(keys, 1, deletes=tuple(names[:2_100])))
    assert client.zcard(keys.part_index(0)) == 2_400 and client.exists(*names[:2_100]) == 0
    assert set(client.zrange(keys.part_index(0), 0, -1)) == {n.encode() for n in names[2_100:]}


def test_a_sketch_chunk_is_appended_and_the_merger_reads_the_sum(own: Settings):
    """An entry with expire at APPEND adds its chunk to the key Redis holds (which keeps its expiry and its one
    index entry) and is noted changed; a key that expired meanwhile takes nothing; the merger sums the chunks."""
    client, keys = redis_io.client(own.redis), KeySpace.of(own)
    store, shape = PartitionStore(client, keys, ("posts",)), own.sketch.shape
    hour, expire_at = hour_of(int(time.time() * 1000)), int(time.time()) + 3600
    sketch, gone = keys.part_sketch(0, "all", "h", hour), keys.part_sketch(0, "US", "h", hour)
    whole = np.zeros(shape.cells, dtype=np.uint32)
    whole[[1, 2]] = 5
    store.submit(_checkpoint(keys, 0, writes=(Entry(sketch, sketch_blob.encode(whole, shape), expire_at),)))
    merger = Merger(client, keys, own)
    merger.run(int(time.time() * 1000))
    chunk = sketch_blob.chunk(np.array([2, 9]), np.array([3, 4]), shape)
    store.submit(_checkpoint(keys, 1, writes=(Entry(sketch, chunk, APPEND), Entry(gone, chunk, APPEND))))
    assert client.get(sketch) == sketch_blob.encode(whole, shape) + chunk and not client.exists(gone)
    assert client.expiretime(sketch) == expire_at and client.zrange(keys.part_index(0), 0, -1) == [sketch.encode()]
    assert client.smembers(keys.part_changed(0)) == {sketch.encode(), gone.encode()}
    merger.run(int(time.time() * 1000))
    merged = np.frombuffer(client.get(keys.cms("all", "h", hour)), dtype=">u4")
    assert merged[[1, 2, 9]].tolist() == [5, 8, 4] and int(merged.sum()) == 17
    client.close()


def test_packed_partition_values_merge_and_a_quiet_list_is_stored_packed(own: Settings):
    """A partition's packed author sketch and lists merge like plain ones; the merged list is stored packed once
    the partition's is (it stopped changing), plain while it changes; the API's readers unpack it. The merged
    author sketch stays plain (the materializer reads it every round)."""
    from serving import store as serving_store
    from trendcore import hll
    from trendcore.packing import is_packed, pack
    from trendcore.post_lists import NewPost, decode_posts, encode_posts

    client, keys = redis_io.client(own.redis), KeySpace.of(own)
    store, hour, expire_at = PartitionStore(client, keys, ("posts",)), hour_of(int(time.time() * 1000)), \
        int(time.time()) + 3600
    sketch = HyperLogLog()
    sketch.add(f"user-{i}" for i in range(500))
    newest = [NewPost(1_000 - i, f"p{i}", f"#quiet post {i} with some text", "US", f"u{i}") for i in range(20)]
    plain = encode_posts(newest)
    part_list = keys.part_new_posts(0, "quiet", hour)
    writes = (Entry(keys.part_authors(0, "quiet", hour), sketch.to_bytes(packed=True), expire_at),
              Entry(part_list, pack(plain), expire_at))
    assert hll.is_packed(writes[0].value)
    store.submit(_checkpoint(keys, 0, writes=writes))
    merger = Merger(client, keys, own)
    merger.run(int(time.time() * 1000))
    merged_list = client.get(keys.merged_new_posts("quiet", hour))
    assert is_packed(merged_list) and len(merged_list) < len(plain)
    assert serving_store.post_lists(client, [keys.merged_new_posts("quiet", hour)]) == [plain]
    assert decode_posts(serving_store.post_lists(client, [keys.merged_new_posts("quiet", hour)])[0]) == newest
    merged_authors = client.get(keys.merged_authors("quiet", hour))
    assert not hll.is_packed(merged_authors) and merged_authors == sketch.to_bytes()
    assert serving_store.distinct_authors(client, keys, "quiet", [hour]) == round(sketch.estimate())

    store.submit(_checkpoint(keys, 1, writes=(Entry(part_list, plain, expire_at),)))  # changing again: plain
    merger.run(int(time.time() * 1000))
    assert client.get(keys.merged_new_posts("quiet", hour)) == plain
    client.close()

"""The load generator: reproducible, realistic, and its ground truth agrees with the contract."""

from __future__ import annotations

from collections import Counter

import pytest

from trendcore.errors import InvalidRecord
from trendcore.events import parse_record
from trendcore.hashtags import tag_keys
from trendcore.windows import minute_of
from trends.gen.model import GenConfig, Stream
from trends.gen.truth import GroundTruth

START = 1_795_982_400_000
CONFIG = dict(start_ms=START, wall_now_ms=START, vocabulary=50_000, malformed_share=0.02, duplicate_share=0.02)


def _records(count=3000, **changes):
    stream = Stream(GenConfig(**{**CONFIG, **changes}))
    return stream, list(stream.records(count))


def test_same_seed_same_stream():
    _, one = _records(500, seed=3)
    _, two = _records(500, seed=3)
    _, other = _records(500, seed=4)
    assert [r.value for r in one] == [r.value for r in two]
    assert [r.value for r in one] != [r.value for r in other]


def test_truth_equals_what_the_contract_extracts():
    """Re-derive the exact counts from the records themselves: valid, deduplicated by post id."""
    stream, records = _records()
    derived: Counter = Counter()
    seen: set[str] = set()
    for record in records:
        if record.topic != "posts":
            continue
        try:
            post = parse_record(record.value, "post", START + 86_400_000)
        except InvalidRecord:
            continue
        if post.post_id in seen:
            continue
        seen.add(post.post_id)
        for key, _ in tag_keys(post.text):
            derived[(key, post.region, minute_of(post.created_at_ms))] += 1
    assert derived == stream.truth.mentions
    assert len(seen) == stream.truth.posts


def test_every_malformed_record_is_refused_and_listed():
    stream, records = _records()
    bad = [r for r in records if r.kind == "malformed"]
    assert len(bad) == len(stream.truth.malformed) > 20
    assert {m["kind"] for m in stream.truth.malformed} == {
        "bad_json", "invalid_utf8", "missing_field", "mistyped_field", "text_too_long", "far_future", "bad_region",
    }
    for record in bad:
        with pytest.raises(InvalidRecord):
            parse_record(record.value, "post", START + 10 * 60_000)
    good = [r for r in records if r.kind != "malformed"]
    for record in good[:500]:
        parse_record(record.value, None, START + 86_400_000)


def test_stream_shape_zipf_spike_late_and_heavy_tail():
    stream, records = _records(20_000, spike_at_s=5.0, spike_ramp_s=5.0, event_rate=1000.0)
    counts = stream.truth.counts()
    top = [tag for tag, _ in counts.most_common(3)]
    assert "viralmoment" in top
    posts = [parse_record(r.value, "post", START + 86_400_000) for r in records if r.kind == "post"]
    assert len({p.region for p in posts}) == 10
    assert 1 <= min(len(tag_keys(p.text)) for p in posts) and max(len(tag_keys(p.text)) for p in posts) <= 6
    assert stream.truth.late > 0 and stream.truth.duplicates > 0
    per_post = sorted((sum(c.values()) for c in stream.truth.engagements.values()), reverse=True)
    top_share = sum(per_post[: len(per_post) // 100]) / sum(per_post)
    assert top_share > 0.3  # the top 1% of engaged posts get a large share of engagements


def test_truth_files_round_trip(tmp_path):
    stream, _ = _records(1000)
    stream.truth.write(tmp_path)
    back = GroundTruth.read(tmp_path)
    assert back.mentions == stream.truth.mentions
    assert back.malformed == stream.truth.malformed
    assert back.summary() == stream.truth.summary()

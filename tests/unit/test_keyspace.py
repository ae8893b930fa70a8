"""Key prefix (redis.key_prefix): every key builder puts it first, every inverse takes it off, and the
layers build their key names only from a KeySpace made from the settings."""

from __future__ import annotations

import ast
import inspect
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError
from redis.crc import key_slot

from adapters.redis import connection_options
from trendcore import keys
from trendcore.errors import ConfigError
from trendcore.keys import PLAIN, KeySpace
from trendcore.settings import KafkaSettings, RedisSettings, Settings

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "trends:"
ARGUMENTS = {"region": "US", "unit": "h", "bucket": 7, "tag": "worldcup", "hour": 491_000, "day": 20_458,
             "post_id": "p:1", "group": "speed", "topic": "posts", "partition": 3, "window": "1h", "rank": "rise",
             "hour_of_week": 167, "run_id": "r1", "key": PREFIX + "exact:US:h:7", "glob": "cms:*", "first_offset": 40}
"""A value for every parameter name of a builder."""


def _builders() -> dict[str, object]:
    """Every public method and property of KeySpace that makes a key name (not the inverses)."""
    found = {}
    for name, member in vars(KeySpace).items():
        if name.startswith("_") or name in ("of", "parse_exact", "parse_baseline", "parse_part"):
            continue
        if isinstance(member, (property, type(KeySpace.cms))):
            found[name] = member
    return found


def _built(space: KeySpace, name: str) -> str:
    member = getattr(space, name)
    if not callable(member):
        return member
    params = list(inspect.signature(member).parameters)
    return member(*(ARGUMENTS[p] for p in params))


def test_every_builder_puts_the_prefix_first():
    space = KeySpace(PREFIX)
    # the 15 keys of docs/redis-layout.md (2 exact views), its 13 partition-state keys, the merged author sketch,
    # the 2 merged post lists, the rebuilding summary, match() and part_match()
    assert len(_builders()) == 34
    for name in _builders():
        plain, prefixed = _built(PLAIN, name), _built(space, name)
        assert prefixed.startswith(PREFIX), name
        if name != "staging":  # its `key` argument is a full (prefixed) name already
            assert prefixed == PREFIX + plain, name


def test_inverses_round_trip_with_a_prefix_and_refuse_other_key_spaces():
    space = KeySpace(PREFIX)
    assert space.parse_exact(space.exact_hour("US", 7)) == ("US", "h", 7)
    assert space.parse_exact(space.exact_day("all", 3)) == ("all", "d", 3)
    assert space.parse_baseline(space.baseline("DE", 167)) == ("DE", 167)
    for inverse, key in ((space.parse_exact, PLAIN.exact_hour("US", 7)),
                         (space.parse_baseline, PLAIN.baseline("DE", 1)), (space.parse_exact, space.baseline("DE", 1))):
        with pytest.raises(ValueError):
            inverse(key)


def _hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the text between the first `{` and the next `}` when not empty, else the key."""
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1:end] if start >= 0 and end > start + 1 else key


@pytest.mark.parametrize("prefix", ["", PREFIX])
def test_every_partition_key_hashes_to_its_partitions_slot(prefix):
    space = KeySpace(prefix)
    names = [space.part_sketch(3, "US", "m", 7), space.part_meta(3, "all", "h", 7), space.part_offset(3, "posts"),
             space.part_authors(3, "a{b}:c", 9), space.part_new_posts(3, "x}", 9), space.part_match(3),
             space.part_seen(3, 40), space.part_index(3), space.part_changed(3), space.part_top_posts(3, "x", 9),
             space.part_events(3, 40), space.part_merged(3, "posts"), space.part_replay(3, "posts"),
             space.part_taking(3)]
    assert {_hash_tag(name) for name in names} == {keys.partition_tag(3, 4)}
    assert _hash_tag(space.part_offset(31, "posts")).startswith("p31.")


def test_slot_is_redis_clusters_key_slot():
    for name in ("posts", "part:{p3.7}:offset:posts", "authors:{worldcup}:h:9", "a{}b", "{}", "ü{x"):
        assert keys.slot(name) == key_slot(name.encode()), name


@pytest.mark.parametrize(("partitions", "masters", "shares"),
                         [(20, 3, [7, 6, 7]), (4, 4, [1, 1, 1, 1]), (12, 3, [4, 4, 4]), (6, 2, [3, 3])])
def test_partitions_spread_evenly_over_masters_of_equal_slot_ranges(partitions, masters, shares):
    """What `redis-cli --cluster create` makes: master i holds slots [i * 16384 / m, (i + 1) * 16384 / m)."""
    space = KeySpace("", partitions)
    on = Counter(keys.slot(space.part_offset(p, "posts")) * masters // keys.SLOTS for p in range(partitions))
    assert [on[m] for m in range(masters)] == shares
    assert len({keys.partition_tag(p, partitions) for p in range(partitions)}) == partitions


def test_a_key_of_another_partition_count_is_refused():
    twenty, four = KeySpace("", 20), KeySpace("", 4)
    assert twenty.parse_part(twenty.part_offset(3, "posts")) == (3, "offset", ("posts",))
    with pytest.raises(ValueError, match="20 partitions"):
        twenty.parse_part(four.part_offset(3, "posts"))
    with pytest.raises(ValueError, match="slots"):
        KeySpace("", 0)


def test_the_default_key_space_spreads_over_the_default_partition_count():
    assert KeySpace().partitions == keys.DEFAULT_PARTITIONS == KafkaSettings().partitions
    assert KeySpace.of(Settings(kafka=KafkaSettings(partitions=20))).partitions == 20


def test_partition_keys_parse_back():
    space = KeySpace(PREFIX)
    assert space.parse_part(space.part_sketch(3, "US", "m", 7)) == (3, "cms", ("US", "m", 7))
    assert space.parse_part(space.part_meta(12, "all", "h", 7)) == (12, "meta", ("all", "h", 7))
    assert space.parse_part(space.part_authors(0, "a:h:1", 9)) == (0, "hll", ("a:h:1", 9))
    assert space.parse_part(space.part_new_posts(0, "x", 9)) == (0, "new", ("x", 9))
    assert space.parse_part(space.part_offset(5, "posts")) == (5, "offset", ("posts",))
    assert space.parse_part(space.part_seen(5, 40)) == (5, "seen", (40,))
    assert space.parse_part(space.part_top_posts(0, "a:b", 9)) == (0, "top", ("a:b", 9))
    assert space.parse_part(space.part_events(5, 40)) == (5, "events", (40,))
    assert space.parse_part(space.part_merged(5, "eng")) == (5, "merged", ("eng",))
    assert space.parse_part(space.part_replay(5, "eng")) == (5, "replay", ("eng",))
    assert _hash_tag(space.merged_new_posts("x", 9)) == _hash_tag(space.merged_top_posts("x", 8)) == "x"
    for key in (PLAIN.part_offset(5, "posts"), space.cms("US", "m", 1), space.match("part:{p1}:cms:US:m"),
                space.match("part:{p1}:hll:x:m:3"), space.match("part:{px}:offset:posts"),
                space.match("part:{p1}:seen:x"), space.part_index(1)):
        with pytest.raises(ValueError):
            space.parse_part(key)


def test_module_functions_are_the_prefix_less_key_space():
    assert keys.cms("US", "m", 1) == PLAIN.cms("US", "m", 1) == "cms:US:m:1"
    assert keys.BATCH_STATUS == "ops:batch" and keys.ACCURACY == "ops:accuracy" and keys.BLOCKLIST == "blocklist"


@pytest.mark.parametrize("prefix", ["trends:", "team-a/trends.", "T_1:", ""])
def test_a_prefix_of_plain_characters_is_accepted(prefix):
    assert KeySpace.of(Settings(redis=RedisSettings(key_prefix=prefix))).prefix == prefix


@pytest.mark.parametrize("prefix", ["my trends:", "t*:", "t?", "t[1]", "t%s", "t\n"])
def test_a_prefix_that_would_break_patterns_is_refused(prefix):
    with pytest.raises(ValidationError, match="key_prefix"):
        RedisSettings(key_prefix=prefix)
    with pytest.raises(ValueError, match="only letters"):
        KeySpace(prefix)


def test_the_layers_build_key_names_only_from_a_key_space():
    """No layer module imports the prefix-less module functions (trendcore.keys' `cms`, `BLOCKLIST`...):
    each one builds a KeySpace from the settings, so a prefix reaches every key."""
    allowed = {"batch/class_archive.py"}  # trains the JVM class archive on a made-up view: no Redis key used
    wrong = []
    for package in ("speed", "serving", "batch", "bench", "dags", "trends"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(), name)):
                if isinstance(node, ast.ImportFrom) and node.module in ("trendcore", "trendcore.keys"):
                    used = {a.name for a in node.names} - {"KeySpace", "PREFIX_PATTERN"}
                    if (node.module == "trendcore.keys" and used) or "keys" in used:
                        wrong.append(f"{name}: from {node.module} import {', '.join(sorted(used))}")
            if name in allowed:
                wrong = [w for w in wrong if not w.startswith(name)]
    assert wrong == []


def test_the_settings_prefix_pattern_is_the_key_spaces():
    field = RedisSettings.model_fields["key_prefix"]
    assert any(getattr(m, "pattern", None) == keys.PREFIX_PATTERN for m in field.metadata)


def test_password_and_ca_file_reach_the_client_only_where_they_apply(tmp_path):
    ca = tmp_path / "ca.crt"
    tls = RedisSettings(url="rediss://127.0.0.1:1/0", username="trends", password="s3cret", ca_file=ca)
    assert connection_options(tls) == {"username": "trends", "password": "s3cret", "ssl_ca_certs": str(ca)}
    assert "s3cret" not in repr(tls)  # a SecretStr: never printed
    assert connection_options(RedisSettings()) == {}


def test_a_ca_file_with_a_plain_url_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="TRENDS_REDIS__CA_FILE"):
        RedisSettings(url="redis://127.0.0.1:1/0", ca_file=tmp_path / "ca.crt")

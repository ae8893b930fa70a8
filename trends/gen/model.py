"""The stream model: what `trends gen` produces, record by record, reproducible from a seed.

Pure: no Kafka here. `Stream.records()` yields (topic kind, key, value) and fills a GroundTruth.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from trendcore.events import SCHEMA_VERSION, format_time
from trendcore.hashtags import normalize_tag
from trends.gen.truth import GroundTruth
from trends.gen.vocab import display_variant, tag_for

REGIONS = ("US", "GB", "DE", "FR", "JP", "BR", "IN", "KR", "ES", "MX")
REGION_WEIGHTS = (30, 10, 8, 7, 12, 9, 14, 5, 3, 2)
MALFORMED_KINDS = (
    "bad_json", "invalid_utf8", "missing_field", "mistyped_field", "text_too_long", "far_future", "bad_region",
)
_WORDS = "the a of to in is on for with at by this that so big new now today look love great".split()


@dataclass
class GenConfig:
    """Knobs of the stream; every default is what `trends gen` uses."""

    seed: int = 42
    start_ms: int = 0
    event_rate: float = 1000.0
    vocabulary: int = 1_000_000
    zipf_s: float = 1.05
    users: int = 100_000
    engagements_per_post: float = 2.0
    late_share: float = 0.02
    late_min_s: int = 60
    late_max_s: int = 3 * 3600
    duplicate_share: float = 0.01
    malformed_share: float = 0.005
    spike_tag: str = "ViralMoment"
    spike_at_s: float = 60.0
    spike_ramp_s: float = 180.0
    spike_peak_share: float = 0.15
    wall_now_ms: int = 0
    regions: tuple[str, ...] = REGIONS
    region_weights: tuple[int, ...] = REGION_WEIGHTS


@dataclass
class Record:
    """One record to send: `topic` is 'posts' or 'engagements' (the settings map it to names)."""

    topic: str
    key: bytes
    value: bytes
    kind: str = "post"


@dataclass
class Stream:
    config: GenConfig
    truth: GroundTruth = field(default_factory=GroundTruth)

    def __post_init__(self) -> None:
        cfg = self.config
        self.rng = random.Random(cfg.seed)
        weights = (1.0 / (rank + 1) ** cfg.zipf_s for rank in range(cfg.vocabulary))
        self._tag_cum = list(itertools.accumulate(weights))
        self._ranks = range(cfg.vocabulary)
        self._region_cum = list(itertools.accumulate(cfg.region_weights))
        self._hot: list[tuple[str, str] | None] = [None] * 1000
        hot_weights = (1.0 / (slot + 1) ** 1.2 for slot in range(1000))
        self._hot_cum = list(itertools.accumulate(hot_weights))
        self._recent: list[bytes] = []
        self._ranks_drawn = self._draws(lambda k: self.rng.choices(self._ranks, cum_weights=self._tag_cum, k=k))
        self._slots_drawn = self._draws(
            lambda k: self.rng.choices(range(len(self._hot)), cum_weights=self._hot_cum, k=k)
        )
        self._kinds_drawn = self._draws(lambda k: self.rng.choices(("view", "like", "repost"), (70, 25, 5), k=k))
        self._sizes_drawn = self._draws(lambda k: self.rng.choices((1, 2, 3, 4, 5), (30, 30, 20, 12, 8), k=k))

    @staticmethod
    def _draws(draw, batch: int = 4096) -> Iterator:
        """Random draws in batches: one `choices(k=...)` call is far cheaper than thousands."""
        while True:
            yield from draw(batch)

    def clock(self, n: int) -> int:
        """Event time of the n-th post: the start plus n posts at the event rate."""
        return self.config.start_ms + int(n * 1000 / self.config.event_rate)

    def records(self, count: int | None = None) -> Iterator[Record]:
        """Posts (with their engagements, duplicates and malformed records) until `count` posts."""
        for n in itertools.count() if count is None else range(count):
            yield from self._step(n)

    def _step(self, n: int) -> Iterator[Record]:
        cfg, rng = self.config, self.rng
        now = self.clock(n)
        roll = rng.random()
        if roll < cfg.malformed_share:
            yield self._malformed(n, now)
        elif roll < cfg.malformed_share + cfg.duplicate_share and self._recent:
            self.truth.duplicates += 1
            value = rng.choice(self._recent)
            yield Record("posts", orjson.loads(value)["post_id"].encode(), value, "duplicate")
        yield self._post(n, now)
        extra = cfg.engagements_per_post
        while extra > 0 and (extra >= 1 or rng.random() < extra):
            extra -= 1
            record = self._engagement(n, now)
            if record is not None:
                yield record

    def _region(self) -> str:
        return self.rng.choices(self.config.regions, cum_weights=self._region_cum)[0]

    def _tags(self, region: str, created_s: float) -> list[str]:
        cfg, rng = self.config, self.rng
        count = next(self._sizes_drawn)
        ranks = [next(self._ranks_drawn) for _ in range(count)]
        shift = cfg.regions.index(region) * 37
        spellings = [tag_for((r + shift) % 200 if r < 200 else r) for r in ranks]
        elapsed = created_s - cfg.spike_at_s
        if elapsed > 0:
            share = cfg.spike_peak_share * min(1.0, elapsed / cfg.spike_ramp_s)
            if rng.random() < share:
                spellings.insert(0, cfg.spike_tag)
        if rng.random() < 0.05:
            spellings.append(spellings[0])
        return [display_variant(s, rng.random()) for s in spellings]

    def _post(self, n: int, now: int) -> Record:
        cfg, rng = self.config, self.rng
        created = now
        if rng.random() < cfg.late_share:
            created = now - rng.randint(cfg.late_min_s, cfg.late_max_s) * 1000
            self.truth.late += 1
        region = self._region()
        tags = self._tags(region, (created - cfg.start_ms) / 1000)
        words = rng.sample(_WORDS, 3)
        text = " ".join([words[0], words[1], *("#" + t for t in tags), words[2]])
        post_id = f"{cfg.seed:x}-{cfg.start_ms // 1000:x}-{n:x}"  # unique per run: ids repeat only on purpose
        user = f"u{int(cfg.users * rng.random() ** 2)}"
        value = orjson.dumps(
            {
                "v": SCHEMA_VERSION, "type": "post", "post_id": post_id, "user_id": user,
                "region": region, "text": text, "created_at": format_time(created),
            }
        )
        self.truth.add_post(post_id, region, created, *self._distinct(tags))
        self._recent.append(value)
        if len(self._recent) > 5000:
            del self._recent[:1000]
        if rng.random() < 0.3:
            self._hot[rng.randrange(len(self._hot))] = (post_id, region)
        return Record("posts", post_id.encode(), value)

    @staticmethod
    def _distinct(tags: list[str]) -> tuple[list[str], list[str]]:
        """The post's distinct tag keys, each beside the spelling it first appears in (a post may repeat a tag)."""
        keys: list[str] = []
        spellings: list[str] = []
        for tag in tags:
            key = normalize_tag(tag)
            if key not in keys:
                keys.append(key)
                spellings.append(tag)
        return keys, spellings

    def _engagement(self, n: int, now: int) -> Record | None:
        rng = self.rng
        target = self._hot[next(self._slots_drawn)]
        if target is None:
            return None
        post_id, region = target
        kind = next(self._kinds_drawn)
        value = orjson.dumps(
            {
                "v": SCHEMA_VERSION, "type": "engagement", "post_id": post_id,
                "user_id": f"u{rng.randrange(self.config.users)}", "kind": kind,
                "region": region, "created_at": format_time(now),
            }
        )
        self.truth.add_engagement(post_id, kind)
        return Record("engagements", post_id.encode(), value, "engagement")

    def _malformed(self, n: int, now: int) -> Record:
        rng = self.rng
        kind = rng.choice(MALFORMED_KINDS)
        key = f"bad-{self.config.seed:x}-{n:x}"
        good = {
            "v": SCHEMA_VERSION, "type": "post", "post_id": key, "user_id": "u1",
            "region": "US", "text": "broken #record", "created_at": format_time(now),
        }
        if kind == "bad_json":
            value = orjson.dumps(good)[:-7]
        elif kind == "invalid_utf8":
            value = orjson.dumps(good).replace(b"broken", b"br\xff\xfeken")
        elif kind == "missing_field":
            del good["user_id"]
            value = orjson.dumps(good)
        elif kind == "mistyped_field":
            good["created_at"] = 1234567890
            value = orjson.dumps(good)
        elif kind == "text_too_long":
            good["text"] = "#long " + "x" * 1000
            value = orjson.dumps(good)
        elif kind == "far_future":
            future = max(now, self.config.wall_now_ms) + 2 * 86_400_000
            good["created_at"] = format_time(future)
            value = orjson.dumps(good)
        else:
            good["region"] = "Atlantis"
            value = orjson.dumps(good)
        self.truth.add_malformed("posts", key, kind)
        return Record("posts", key.encode(), value, "malformed")

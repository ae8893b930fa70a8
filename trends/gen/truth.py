"""Ground truth of a generated stream: exact mention counts and every malformed record sent."""

from __future__ import annotations

import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trendcore.windows import minute_of


@dataclass
class GroundTruth:
    """Exact, deduplicated mention counts per (tag, region, minute), and what else was sent."""

    mentions: Counter = field(default_factory=Counter)
    display: dict[str, str] = field(default_factory=dict)
    engagements: dict[str, Counter] = field(default_factory=dict)
    malformed: list[dict] = field(default_factory=list)
    posts: int = 0
    duplicates: int = 0
    late: int = 0
    engagement_count: int = 0
    first_ms: int | None = None
    last_ms: int | None = None

    def add_post(self, post_id: str, region: str, created_ms: int, keys: list[str], spellings: list[str]) -> None:
        """One post; `keys` are its distinct tag keys, `spellings` the spelling each first appeared in."""
        self.posts += 1
        minute = minute_of(created_ms)
        for key, spelling in zip(keys, spellings, strict=True):
            self.mentions[(key, region, minute)] += 1
            self.display.setdefault(key, spelling)
        self.first_ms = created_ms if self.first_ms is None else min(self.first_ms, created_ms)
        self.last_ms = created_ms if self.last_ms is None else max(self.last_ms, created_ms)

    def add_engagement(self, post_id: str, kind: str) -> None:
        self.engagement_count += 1
        self.engagements.setdefault(post_id, Counter())[kind] += 1

    def add_malformed(self, topic: str, key: str, kind: str) -> None:
        self.malformed.append({"topic": topic, "key": key, "kind": kind})

    def counts(self, region: str | None = None, minutes: range | None = None) -> Counter:
        """Mentions per tag, optionally for one region (None or 'all' = worldwide) and minute range."""
        total: Counter = Counter()
        for (tag, reg, minute), n in self.mentions.items():
            if region not in (None, "all") and reg != region:
                continue
            if minutes is not None and minute not in minutes:
                continue
            total[tag] += n
        return total

    def summary(self) -> dict:
        return {
            "posts": self.posts,
            "duplicates": self.duplicates,
            "late": self.late,
            "malformed": len(self.malformed),
            "engagements": self.engagement_count,
            "mentions": sum(self.mentions.values()),
            "distinct_tags": len({k[0] for k in self.mentions}),
            "first_ms": self.first_ms,
            "last_ms": self.last_ms,
        }

    def write(self, folder: Path) -> None:
        """mentions.csv, engagements.csv, malformed.jsonl and summary.json in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "mentions.csv", "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(["tag", "region", "minute", "count"])
            for (tag, region, minute), n in sorted(self.mentions.items()):
                writer.writerow([tag, region, minute, n])
        with open(folder / "engagements.csv", "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(["post_id", "like", "view", "repost"])
            for post_id, kinds in sorted(self.engagements.items()):
                writer.writerow([post_id, kinds["like"], kinds["view"], kinds["repost"]])
        with open(folder / "malformed.jsonl", "w", encoding="utf-8") as out:
            out.writelines(json.dumps(m) + "\n" for m in self.malformed)
        (folder / "display.json").write_text(json.dumps(self.display, ensure_ascii=False), encoding="utf-8")
        (folder / "summary.json").write_text(json.dumps(self.summary(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> GroundTruth:
        """Load what `write` wrote (for tests, benchmarks and notebooks)."""
        truth = cls()
        with open(folder / "mentions.csv", encoding="utf-8") as src:
            for row in csv.DictReader(src):
                truth.mentions[(row["tag"], row["region"], int(row["minute"]))] = int(row["count"])
        with open(folder / "engagements.csv", encoding="utf-8") as src:
            for row in csv.DictReader(src):
                truth.engagements[row["post_id"]] = Counter(
                    {k: int(row[k]) for k in ("like", "view", "repost") if int(row[k])}
                )
        truth.malformed = [json.loads(line) for line in open(folder / "malformed.jsonl", encoding="utf-8")]
        truth.display = json.loads((folder / "display.json").read_text(encoding="utf-8"))
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        for name in ("posts", "duplicates", "late", "first_ms", "last_ms"):
            setattr(truth, name, summary[name])
        truth.engagement_count = summary["engagements"]
        return truth

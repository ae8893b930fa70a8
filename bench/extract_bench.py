"""Extractor throughput on one core: ours (twitter-text rules + counting keys) vs a naive regex.

Run: .venv/bin/python bench/extract_bench.py [--posts 200000]
The naive baseline (`#(\\w+)` + lower()) is what the extractor replaces; it gets full-width signs,
URLs, NFKC and casefolding wrong, so it is a speed reference, not an alternative.
"""

from __future__ import annotations

import argparse
import re
import time

from trendcore.hashtags import normalize_tag, tag_keys
from trends.gen.model import GenConfig, Stream

NAIVE = re.compile(r"#(\w+)")


def naive_keys(text: str) -> list[str]:
    """A naive extractor: word characters after '#', lower-cased, unique in order."""
    return list(dict.fromkeys(tag.lower() for tag in NAIVE.findall(text)))


def texts(count: int) -> list[str]:
    import orjson

    stream = Stream(GenConfig(start_ms=0, wall_now_ms=0, malformed_share=0, duplicate_share=0, engagements_per_post=0))
    return [orjson.loads(r.value)["text"] for r in stream.records(count)]


def rate(fn, posts: list[str], cold=None) -> float:
    if cold:
        cold()
    started = time.perf_counter()
    for text in posts:
        fn(text)
    return len(posts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=200_000)
    args = parser.parse_args()
    posts = texts(args.posts)
    ours_cold = rate(tag_keys, posts, cold=normalize_tag.cache_clear)
    ours_warm = rate(tag_keys, posts)
    naive = rate(naive_keys, posts)
    print(f"posts: {len(posts):,} (generated, 1-5 multilingual tags each)")
    print(f"ours, cold key cache : {ours_cold:>10,.0f} posts/s")
    print(f"ours, warm key cache : {ours_warm:>10,.0f} posts/s")
    print(f"naive regex baseline : {naive:>10,.0f} posts/s")
    print(f"ours / naive         : {ours_warm / naive:>10.2f}x")


if __name__ == "__main__":
    main()

"""twitter-text's published hashtag conformance cases must pass unchanged."""

from pathlib import Path

import pytest
import yaml

from trendcore.hashtags import extract_hashtags, extract_hashtags_with_indices

CASES = yaml.safe_load((Path(__file__).parent.parent / "data" / "twitter_text_hashtags.yml").read_text("utf-8"))[
    "tests"
]


def _ids(cases):
    return [c["description"] for c in cases]


HASHTAG_CASES = CASES["hashtags"] + CASES["hashtags_from_astral"]


@pytest.mark.parametrize("case", HASHTAG_CASES, ids=_ids(HASHTAG_CASES))
def test_hashtags(case):
    assert extract_hashtags(case["text"]) == case["expected"]


@pytest.mark.parametrize("case", CASES["hashtags_with_indices"], ids=_ids(CASES["hashtags_with_indices"]))
def test_hashtags_with_indices(case):
    got = [
        {"hashtag": tag, "indices": [start, start + 1 + len(tag)]}
        for tag, start in extract_hashtags_with_indices(case["text"])
    ]
    assert got == case["expected"]


def test_case_count_is_complete():
    """Guards against a truncated data file: the published suite has these many hashtag cases."""
    assert (len(CASES["hashtags"]), len(CASES["hashtags_from_astral"]), len(CASES["hashtags_with_indices"])) == (
        65,
        3,
        8,
    )

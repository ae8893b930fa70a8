"""Hashtag extraction as the twitter-text libraries do it, and the counting key of a tag.

`extract_hashtags` follows twitter-text's `validHashtag` rule (boundary, hash sign, at least one
letter, no `://` or second hash right after) and drops tags that sit inside a URL. `tag_keys`
turns a post into its unique counting keys, in order of first appearance, with display spellings.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import regex

# twitter-text: letters and marks, decimal digits, and a few joiners/punctuation used inside words.
_SPECIAL = "_\u200c\u200d\ua67e\u05be\u05f3\u05f4\uff5e\u301c\u309b\u309c\u30a0\u30fb\u3003\u0f0b\u0f0c\u00b7"
_ALNUM = rf"[\p{{L}}\p{{M}}\p{{Nd}}{_SPECIAL}]"
_ALPHA = r"[\p{L}\p{M}]"
_HASHTAG = regex.compile(
    rf"(?:^|(?<=[\ufe0e\ufe0f])|(?<=[^&\p{{L}}\p{{M}}\p{{Nd}}{_SPECIAL}]))"
    rf"[#\uff03](?![\ufe0f\u20e3])({_ALNUM}*{_ALPHA}{_ALNUM}*)",
    regex.V1,
)
_END_HASHTAG = ("#", "\uff03", "://")  # a tag followed by these is no tag (twitter-text endHashtagMatch)

# A loose URL finder (scheme optional, dotted host with a 2+ letter TLD, any non-space path): only
# used to drop hashtags that are part of a URL, such as `twitter.com/#hashtag`.
_URL = regex.compile(
    r"(?:(?<=^)|(?<=[^\p{L}\p{N}@\uff20$#\uff03\u202a-\u202e]))"
    r"(?:https?://)?(?:[\p{L}\p{N}_-]+\.)+\p{L}{2,}(?::\d+)?(?:[/?#]\S*)?",
    regex.V1 | regex.IGNORECASE,
)

_VARIATION_SELECTORS = dict.fromkeys(
    [*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)], None
)


def extract_hashtags(text: str) -> list[str]:
    """Return the hashtags of `text` as written (without the hash sign), in order, repeats kept."""
    return [tag for tag, _ in extract_hashtags_with_indices(text)]


def extract_hashtags_with_indices(text: str) -> list[tuple[str, int]]:
    """Hashtags with the code-point index of their hash sign, as twitter-text reports them."""
    if "#" not in text and "\uff03" not in text:
        return []
    found: list[tuple[str, int]] = []
    for match in _HASHTAG.finditer(text):
        if not text.startswith(_END_HASHTAG, match.end()):
            found.append((match.group(1), match.start()))
    for _, start in found:  # a loop, not any(): this runs for every post a speed worker takes
        if start and not text[start - 1].isspace():
            return _drop_tags_in_urls(text, found)
    return found


def _drop_tags_in_urls(text: str, found: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Remove hashtags whose hash sign lies inside a URL that starts before it."""
    spans = [(m.start(), m.end()) for m in _URL.finditer(text)]
    if not spans:
        return found
    return [(tag, pos) for tag, pos in found if not any(s < pos < e for s, e in spans)]


@lru_cache(maxsize=1 << 16)
def normalize_tag(raw: str) -> str:
    """The counting key of a tag: NFKC, casefold, NFC, variation selectors dropped.

    Applied to the extracted tag only (never to the whole text). Idempotent: the pipeline is
    repeated until it is a fixed point (one extra pass for the rare tags that need it).
    """
    if raw.isascii():
        return "".join(raw.lower().split()).replace("#", "")
    key = _normalize_once(raw)
    for _ in range(3):
        again = _normalize_once(key)
        if again == key:
            break
        key = again
    return key


def _normalize_once(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    key = unicodedata.normalize("NFC", folded).translate(_VARIATION_SELECTORS)
    # NFKC can expand a few ligatures into words with spaces or produce a hash sign: drop both.
    return "".join(key.split()).replace("#", "")


def tag_keys(text: str) -> list[tuple[str, str]]:
    """A post's unique (counting key, display spelling) pairs, in order of first appearance."""
    seen: dict[str, str] = {}
    for raw in extract_hashtags(text):
        key = normalize_tag(raw)
        if key and key not in seen:
            seen[key] = raw if raw.isascii() else raw.translate(_VARIATION_SELECTORS)
    return list(seen.items())


def counting_keys(text: str) -> list[str]:
    """A post's unique counting keys, in order of first appearance: `tag_keys` without the spellings, for
    the speed worker, which takes every post's."""
    keys: dict[str, None] = {}
    for raw, _ in extract_hashtags_with_indices(text):
        key = normalize_tag(raw)
        if key:
            keys[key] = None  # a key seen before keeps its first place
    return list(keys)

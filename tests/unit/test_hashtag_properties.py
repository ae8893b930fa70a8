"""Properties of extraction and the counting key, for any string (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trendcore.hashtags import counting_keys, extract_hashtags, normalize_tag, tag_keys

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=200)
tagged = st.lists(st.one_of(st.just("#"), st.just("＃"), st.just(" "), st.text(max_size=8)), max_size=30).map("".join)


@settings(max_examples=500)
@given(st.one_of(texts, tagged))
def test_never_raises_and_keys_have_no_hash_or_space(text):
    for key, display in tag_keys(text):
        assert key
        assert "#" not in key
        assert not any(ch.isspace() for ch in key)
        assert display


@settings(max_examples=500)
@given(st.text(max_size=40))
def test_normalisation_is_idempotent(raw):
    key = normalize_tag(raw)
    assert normalize_tag(key) == key


@settings(max_examples=300)
@given(tagged)
def test_keys_are_unique_per_post(text):
    keys = [key for key, _ in tag_keys(text)]
    assert len(keys) == len(set(keys))


@settings(max_examples=500)
@given(st.one_of(texts, tagged))
def test_counting_keys_are_tag_keys_without_spellings(text):
    assert counting_keys(text) == [key for key, _ in tag_keys(text)]


def test_spellings_fold_into_one_key():
    assert {normalize_tag(t) for t in ("Café", "CAFÉ", "cafe\u0301")} == {"café"}
    assert normalize_tag("Straße") == normalize_tag("STRASSE") == "strasse"
    assert normalize_tag("ｈａｓｈ") == "hash"
    assert normalize_tag("ok\ufe0f") == "ok"


def test_first_appearance_order_and_display_kept():
    assert tag_keys("#WorldCup then #news and #worldcup") == [("worldcup", "WorldCup"), ("news", "news")]


def test_nfkc_is_applied_to_the_tag_not_the_text():
    # NFKC of the whole text would turn the full-width sign into '#' and U+2074 into '4' first.
    assert extract_hashtags("x ＃ｈａｓｈ") == ["ｈａｓｈ"]

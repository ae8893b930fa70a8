"""The rules that have one owner in the core: bucket units, hour and day parsing, answer sources, key inverses."""

import pytest

from trendcore import keys
from trendcore.windows import DAY_MS, HOUR_MS, bucket_of, day_date, parse_day, parse_hour, source_of


def test_bucket_of_knows_days_and_refuses_unknown_units():
    ms = 3 * DAY_MS + 5 * HOUR_MS + 7
    assert bucket_of(ms, "d") == 3
    assert bucket_of(ms, "h") == 3 * 24 + 5
    with pytest.raises(ValueError, match="unknown bucket unit 'w'"):
        bucket_of(ms, "w")


def test_hours_and_days_parse_one_way():
    assert parse_hour("2026-11-29") == parse_hour("2026-11-29T00") == parse_day("2026-11-29") * 24
    assert parse_hour("2026-11-29T19:00Z") == parse_hour("2026-11-29t19:00z") == parse_hour("2026-11-29T19")
    with pytest.raises(ValueError, match="not on an hour boundary"):
        parse_hour("2026-11-29T19:30Z")
    with pytest.raises(ValueError, match="is not a UTC hour"):
        parse_hour("yesterday")
    with pytest.raises(ValueError, match="is not a UTC day"):
        parse_day("2026-13-01")
    assert day_date(parse_day("2026-11-29")).isoformat() == "2026-11-29"


def test_an_answer_is_exact_only_when_every_kept_bucket_is():
    assert source_of(["exact", "exact", "missing"]) == "exact"
    assert source_of(["exact", "approx"]) == "mixed"
    assert source_of(["approx", "missing"]) == "approx"
    assert source_of(["missing"]) == source_of([]) == "missing"


def test_key_names_have_inverses():
    assert keys.parse_exact(keys.exact_hour("US", 7)) == ("US", "h", 7)
    assert keys.parse_exact(keys.exact_day("all", 3)) == ("all", "d", 3)
    assert keys.parse_baseline(keys.baseline("DE", 167)) == ("DE", 167)
    with pytest.raises(ValueError):
        keys.parse_exact(keys.baseline("DE", 1))

"""docs/configuration.md is the generated reference of the settings model, not a stale copy."""

from pathlib import Path

from trends.configdoc import markdown


def test_configuration_doc_matches_the_settings_model():
    page = Path(__file__).parent.parent.parent / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == markdown(), "regenerate: .venv/bin/trends config > docs/configuration.md"

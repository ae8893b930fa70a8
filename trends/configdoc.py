"""The configuration reference, generated from the settings model (docs/configuration.md)."""

from __future__ import annotations

from pydantic import BaseModel

from trendcore.settings import PROJECT_ROOT, Settings


def _default(value: object) -> str:
    text = str(value)
    root = str(PROJECT_ROOT)
    return text.replace(root, "<repo>") if root in text else text


def rows(model: type[BaseModel] = Settings, prefix: str = "TRENDS_") -> list[tuple[str, str, str]]:
    """(environment variable, default, description) for every leaf setting."""
    found: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.extend(rows(annotation, f"{prefix}{name.upper()}__"))
        else:
            found.append((f"{prefix}{name.upper()}", _default(field.default), field.description or ""))
    return found


def markdown() -> str:
    """The whole docs/configuration.md page."""
    lines = [
        "# Configuration",
        "",
        "Generated from `trendcore/settings/` by `.venv/bin/trends config > docs/configuration.md`;",
        "a unit test fails when this page and the model disagree.",
        "",
        "Every setting is read from the environment (prefix `TRENDS_`, nested fields joined by `__`)",
        "or from a `.env` file in the working directory. `<repo>` is the checkout's folder.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{var}` | `{default}` | {desc} |" for var, default, desc in rows()]
    return "\n".join(lines) + "\n"

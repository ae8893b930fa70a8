"""The configuration reference, generated from the settings model (docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trendcore.settings import ENV_PREFIX, Settings
from trendcore.settings.paths import is_under_home


def _default(field: FieldInfo) -> str:
    """The default as the page shows it: a path under the data directory as `$TRENDS_HOME/...`."""
    if is_under_home(field):
        sub = Path(field.default)
        return f"${ENV_PREFIX}HOME" if sub == Path(".") else f"${ENV_PREFIX}HOME/{sub}"
    if isinstance(field.default, Path) and not field.default.is_absolute():
        return f"./{field.default}"
    return str(field.default)


def rows(model: type[BaseModel] = Settings, prefix: str = ENV_PREFIX) -> list[tuple[str, str, str]]:
    """(environment variable, default, description) for every leaf setting."""
    found: list[tuple[str, str, str]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.extend(rows(annotation, f"{prefix}{name.upper()}__"))
        else:
            found.append((f"{prefix}{name.upper()}", _default(field), field.description or ""))
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
        "or from a `.env` file in the working directory. A `TRENDS_` variable that names no setting",
        "stops every command at start, naming the nearest real one.",
        "",
        "Every path defaults to a place under one data directory, `TRENDS_HOME` (default `./var` of",
        "the directory the command runs in): the stack's data and logs, the Maven jars, the lake,",
        "Airflow's home. A path set on its own (e.g. `TRENDS_SPARK__LAKE`) wins over its default.",
        "",
        "| variable | default | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{var}` | `{default}` | {desc} |" for var, default, desc in rows()]
    return "\n".join(lines) + "\n"

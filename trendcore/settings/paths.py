"""Path defaults: every path the project writes defaults to a place under one data directory (TRENDS_HOME).

Nothing here points into the checkout or site-packages: after `pip install .` the data, jars and logs go
where the command runs (`./var`) or where TRENDS_HOME says, never next to the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

DEFAULT_HOME = Path("var")
"""The data directory when TRENDS_HOME is unset, relative to the working directory."""

_UNDER_HOME = "under_home"


def under_home(sub: str, description: str) -> Any:
    """A path field whose default is `sub` under the data directory (Settings.home) unless it is set.

    Standalone (a section built outside Settings) the default is `sub` relative to the working directory.
    """
    return Field(Path(sub), description=description, json_schema_extra={_UNDER_HOME: True})


def is_under_home(field: FieldInfo) -> bool:
    """Whether `field` was declared with `under_home` (its default derives from the data directory)."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and bool(extra.get(_UNDER_HOME))


def absolute(path: Path) -> Path:
    """`path` with ~ expanded, made absolute against the working directory (symlinks kept)."""
    return path.expanduser().absolute()


def place_under(model: BaseModel, home: Path) -> BaseModel:
    """`model` with each `under_home` path it was not given set under `home`; a copy when anything changes."""
    update = {name: home / field.default for name, field in type(model).model_fields.items()
              if is_under_home(field) and name not in model.model_fields_set}
    return model.model_copy(update=update) if update else model

"""Settings say what they mean: a misspelt TRENDS_ variable stops the process, and every path defaults to a
place under one data directory (TRENDS_HOME, default ./var of the working directory)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import BaseModel

from batch.stack import dags_folder
from trendcore.errors import ConfigError
from trendcore.settings import Settings, to_env


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No TRENDS_ variable of the caller's environment, and no .env file, in these tests."""
    for name in list(os.environ):
        if name.upper().startswith("TRENDS_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _paths(model: BaseModel, where: str = "") -> dict[str, Path | None]:
    """Every path-typed field of `model`, nested ones included, by dotted name."""
    found: dict[str, Path | None] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found.update(_paths(value, f"{where}{name}."))
        elif isinstance(value, Path) or (value is None and "Path" in str(type(model).model_fields[name].annotation)):
            found[f"{where}{name}"] = value
    return found


def test_a_variable_in_the_wrong_section_names_the_right_one(monkeypatch):
    monkeypatch.setenv("TRENDS_BATCH__CATCHUP", "true")
    with pytest.raises(ConfigError, match=r"TRENDS_BATCH__CATCHUP \(did you mean TRENDS_AIRFLOW__CATCHUP\?\)"):
        Settings()


def test_a_removed_variable_says_what_replaced_it(monkeypatch):
    monkeypatch.setenv("TRENDS_SPEED__STATE", "lua")
    with pytest.raises(ConfigError, match=r"TRENDS_SPEED__STATE \(removed: the speed layer keeps partition state"):
        Settings()


def test_a_known_variable_passes_in_any_case(monkeypatch):
    monkeypatch.setenv("TRENDS_AIRFLOW__CATCHUP", "true")
    monkeypatch.setenv("trends_spark__master", "local[1]")
    settings = Settings()
    assert settings.airflow.catchup is True and settings.spark.master == "local[1]"


def test_a_misspelt_variable_is_refused_in_any_case_and_in_a_dotenv_file(monkeypatch, tmp_path):
    monkeypatch.setenv("trends_spark__lak", "/x")
    with pytest.raises(ConfigError, match="did you mean TRENDS_SPARK__LAKE"):
        Settings()
    monkeypatch.delenv("trends_spark__lak")
    (tmp_path / ".env").write_text("TRENDS_REDIS__URI=redis://elsewhere:6379/0\n")
    with pytest.raises(ConfigError, match="did you mean TRENDS_REDIS__URL"):
        Settings()


def test_a_section_as_one_json_value_is_a_known_name(monkeypatch):
    monkeypatch.setenv("TRENDS_SPEED", '{"workers": 3}')
    assert Settings().speed.workers == 3


def test_to_env_round_trips_without_tripping_the_check(monkeypatch, tmp_path):
    original = Settings(home=tmp_path / "data", spark={"lake": tmp_path / "lake"}, api={"token": "t"},
                        airflow={"catchup": True, "dags": tmp_path / "dags"})
    for name, value in to_env(original).items():
        monkeypatch.setenv(name, value)
    assert Settings() == original


def test_every_path_defaults_under_var_of_the_working_directory(tmp_path):
    settings = Settings()
    paths = _paths(settings)
    assert settings.home == tmp_path / "var"
    assert paths.pop("airflow.dags") is None  # the installed DAGs folder, found by the batch layer
    assert {"home", "stack.home", "stack.jars", "spark.lake", "airflow.home"} <= set(paths)
    outside = {name: path for name, path in paths.items()
               if path is not None and not path.is_relative_to(tmp_path / "var")}
    assert outside == {}
    assert (dags_folder(settings) / "trends_dags.py").is_file()


def test_trends_home_moves_every_default_and_a_set_path_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("TRENDS_HOME", "data")  # relative: to the working directory, made absolute
    monkeypatch.setenv("TRENDS_SPARK__LAKE", "/lakes/trends")
    settings = Settings()
    assert settings.home == tmp_path / "data"
    assert (settings.stack.home, settings.stack.jars) == (tmp_path / "data", tmp_path / "data" / "jars")
    assert settings.airflow.home == tmp_path / "data" / "airflow"
    assert settings.spark.lake == Path("/lakes/trends")

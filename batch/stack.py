"""Airflow standalone (SQLite) as a component of the local stack, with the batch DAGs enabled."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel

from trendcore.settings import PROJECT_ROOT, Settings
from trends.stack import procs
from trends.stack.manager import Component


def settings_env(settings: Settings, prefix: str = "TRENDS_") -> dict[str, str]:
    """The settings as TRENDS_SECTION__FIELD variables, so processes we start see the same settings."""
    env: dict[str, str] = {}

    def walk(model: BaseModel, path: str) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            key = f"{path}{name.upper()}"
            if isinstance(value, BaseModel):
                walk(value, key + "__")
            elif value is not None:
                env[key] = str(value).lower() if isinstance(value, bool) else str(value)

    walk(settings, prefix)
    return env


def airflow_env(settings: Settings) -> dict[str, str]:
    """AIRFLOW_* for our home, DAGs folder and address; the venv's bin/ first on PATH."""
    air = settings.airflow
    venv_bin = str(Path(sys.executable).parent)
    return {
        **settings_env(settings),
        "AIRFLOW_HOME": str(air.home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(air.dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": str(air.parallelism),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(air.port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{air.port}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(air.home / "logs"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
    }


def service(settings: Settings) -> procs.Service:
    return procs.Service("airflow", settings.stack.home / "run", "127.0.0.1", settings.airflow.port)


def login(settings: Settings) -> str:
    """The admin login standalone generated (simple auth manager), or where to find it."""
    home = settings.airflow.home
    for name in ("simple_auth_manager_passwords.json.generated",):
        path = home / name
        if path.exists():
            users = json.loads(path.read_text())
            return ", ".join(f"{user} / {password}" for user, password in users.items())
    return f"see {home}/simple_auth_manager_passwords.json.generated"


def start(settings: Settings) -> int:
    """`airflow standalone` in the background; returns once the UI answers, printing its address and login."""
    svc = service(settings)
    settings.airflow.home.mkdir(parents=True, exist_ok=True)
    airflow = str(Path(sys.executable).parent / "airflow")
    pid = procs.start(svc, [airflow, "standalone"], env=airflow_env(settings), cwd=settings.airflow.home)
    procs.wait_ready(svc, max(180.0, settings.stack.start_timeout_s))
    print(f"airflow: UI http://127.0.0.1:{settings.airflow.port}  login {login(settings)}", file=sys.stderr)
    return pid


COMPONENTS: dict[str, Component] = {"airflow": Component(service, start)}

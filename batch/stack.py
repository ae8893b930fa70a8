"""Airflow standalone (SQLite) as a component of the local stack, with the batch DAGs enabled."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trendcore.process import ProcessSpec
from trendcore.settings import Settings, to_env

DAGS = Path(__file__).resolve().parent.parent / "dags"
"""The DAGs folder installed beside this package (pyproject.toml installs `dags` with the others): the
checkout's dags/ in an editable install, site-packages/dags after `pip install .`."""


def dags_folder(settings: Settings) -> Path:
    """The folder Airflow loads DAGs from: TRENDS_AIRFLOW__DAGS when set, else the installed one."""
    return settings.airflow.dags or DAGS


def airflow_env(settings: Settings) -> dict[str, str]:
    """AIRFLOW_* for our home, DAGs folder and address; the venv's bin/ first on PATH."""
    air = settings.airflow
    venv_bin = str(Path(sys.executable).parent)
    return {
        **to_env(settings),
        "AIRFLOW_HOME": str(air.home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder(settings)),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": str(air.parallelism),
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(air.port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{air.port}",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(air.home / "logs"),
        # A task's supervisor reports to the API server, which a busy 2-core machine can keep from answering
        # within the default 5 s, five tries in a row: the task then fails before it starts (seen in the soak).
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        # A task's token is issued when it is queued and lives `task_queued_timeout` (10 minutes by default),
        # which also fails a task queued longer. With one task at a time (`parallelism`), a task queued behind a
        # long archive catch-up (922-999 s in the 30-minute soak) started with an expired token and failed
        # ("Signature has expired", apache/airflow#53713). Running tasks renew theirs on each heartbeat.
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "21600",
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
    }


def login(settings: Settings) -> str:
    """The admin login standalone generated (simple auth manager), or where to find it."""
    home = settings.airflow.home
    for name in ("simple_auth_manager_passwords.json.generated",):
        path = home / name
        if path.exists():
            users = json.loads(path.read_text())
            return ", ".join(f"{user} / {password}" for user, password in users.items())
    return f"see {home}/simple_auth_manager_passwords.json.generated"


def processes(settings: Settings) -> list[ProcessSpec]:
    """`airflow standalone` (SQLite) in its home, ready when the UI's port answers; prints the login."""
    air = settings.airflow
    return [ProcessSpec(
        "airflow", [str(Path(sys.executable).parent / "airflow"), "standalone"], "127.0.0.1", air.port,
        env=airflow_env(settings), cwd=air.home, ready_timeout_s=max(180.0, settings.stack.start_timeout_s),
        prepare=lambda: air.home.mkdir(parents=True, exist_ok=True),
        banner=lambda: f"airflow: UI http://127.0.0.1:{air.port}  login {login(settings)}",
    )]

"""The API's server command line as the stack runs it (serving/stack.py)."""

from __future__ import annotations

from serving.stack import argv
from trendcore.settings import Settings


def test_a_stopping_worker_is_killed_after_the_stop_grace():
    settings = Settings()
    settings = settings.model_copy(update={"api": settings.api.model_copy(update={"stop_grace_s": 7})})
    command = argv(settings)
    assert command[command.index("--workers-kill-timeout") + 1] == "7"

"""`python -m speed ...`: the same commands as `trends speed ...` (used by the local worker pool)."""

from speed.cli import app

app(prog_name="speed")

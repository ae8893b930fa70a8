"""`python -m speed ...`: the same commands as `trends speed ...` (used by the local worker pool)."""

from rich.console import Console

from speed.cli import CONFIG_EXIT, app
from trendcore.errors import ConfigError, TrendsError

try:
    app(prog_name="speed")
except TrendsError as exc:  # plain words, as `trends` prints them
    Console(stderr=True).print(f"[red]error:[/] {exc}")
    raise SystemExit(CONFIG_EXIT if isinstance(exc, ConfigError) else 1) from None

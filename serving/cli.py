"""`trends serve ...`: run the API in the foreground, or print the local stack's token."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from trendcore.settings import Settings

app = typer.Typer(help="The HTTP API and dashboard.", no_args_is_help=True)


@app.command()
def run(
    host: Annotated[Optional[str], typer.Option(help="Bind address (default TRENDS_API__HOST).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default TRENDS_API__PORT).")] = None,
    workers: Annotated[
        Optional[int], typer.Option(help="Server worker processes (default TRENDS_API__WORKERS).")
    ] = None,
) -> None:
    """Serve the API and dashboard in the foreground (Ctrl-C stops it), with the stack's exact server command."""
    import os
    import tempfile
    from pathlib import Path

    from serving.metrics import MULTIPROC_ENV, fresh_multiproc_dir
    from serving.stack import argv
    from trendcore.settings import to_env

    settings = Settings()
    given = {"host": host, "port": port, "workers": workers}
    api = settings.api.model_copy(update={k: v for k, v in given.items() if v is not None})
    settings = settings.model_copy(update={"api": api})
    env = {**os.environ, **to_env(settings)}
    env[MULTIPROC_ENV] = str(fresh_multiproc_dir(Path(tempfile.mkdtemp(prefix="trends-api-metrics-"))))
    typer.echo(f"dashboard: http://{api.host}:{api.port}/   API docs: http://{api.host}:{api.port}/docs", err=True)
    command = argv(settings)
    os.execve(command[0], command, env)  # the server replaces this process: signals reach it directly


@app.command()
def token() -> None:
    """Print the local stack's write token (generated on the first `trends up`)."""
    from serving.stack import ensure_token

    typer.echo(ensure_token(Settings()).read_text().strip())

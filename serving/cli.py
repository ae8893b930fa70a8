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
    workers: Annotated[Optional[int], typer.Option(help="uvicorn worker processes (default TRENDS_API__WORKERS).")] = None,
) -> None:
    """Serve the API and dashboard in the foreground (Ctrl-C stops it)."""
    import os

    import uvicorn

    import tempfile
    from pathlib import Path

    from serving.metrics import MULTIPROC_ENV, fresh_multiproc_dir
    from serving.stack import settings_env

    settings = Settings()
    api = settings.api.model_copy(update={k: v for k, v in {"host": host, "port": port, "workers": workers}.items() if v is not None})
    settings = settings.model_copy(update={"api": api})
    os.environ.update(settings_env(settings))
    if api.workers > 1:
        os.environ[MULTIPROC_ENV] = str(fresh_multiproc_dir(Path(tempfile.mkdtemp(prefix="trends-api-metrics-"))))
    typer.echo(f"dashboard: http://{api.host}:{api.port}/   API docs: http://{api.host}:{api.port}/docs", err=True)
    uvicorn.run("serving.app:app_from_env", factory=True, host=api.host, port=api.port, workers=api.workers,
                loop="uvloop", http="httptools", access_log=False, backlog=4096)


@app.command()
def token() -> None:
    """Print the local stack's write token (generated on the first `trends up`)."""
    from serving.stack import ensure_token

    typer.echo(ensure_token(Settings()).read_text().strip())

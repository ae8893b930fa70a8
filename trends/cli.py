"""`trends`: the one command line of the project. Each layer adds its own sub-commands."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import orjson
import typer
from rich.console import Console
from rich.table import Table

import batch.cli
import serving.cli
import speed.cli
from trendcore.errors import TrendsError
from trendcore.settings import Settings

if TYPE_CHECKING:
    from trends.gen.run import GenResult

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report an interrupted command."""

app = typer.Typer(help="Hashtag trends: local stack, load generator and every layer's commands.", no_args_is_help=True)
console = Console(stderr=True)

# Each layer's own sub-commands.
app.add_typer(speed.cli.app, name="speed")
app.add_typer(batch.cli.app, name="batch")
app.add_typer(serving.cli.app, name="serve")
kafka_app = typer.Typer(help="Kafka: the project's topics on any cluster the settings point at.", no_args_is_help=True)
app.add_typer(kafka_app, name="kafka")


@kafka_app.command("create-topics")
def create_topics() -> None:
    """Create the posts, engagements and dead-letter topics where missing (idempotent), with the partitions,
    replication factor, min.insync.replicas and retention.ms of TRENDS_KAFKA__*, over the configured security."""
    from trends.stack import manager

    manager.create_topics(Settings(), log=console.print)


@app.command()
def up(
    names: Annotated[Optional[list[str]], typer.Argument(
        help="Components to start (see `trends status`), e.g. speed-workers api; default: all of them.",
        show_default=False)] = None,
) -> None:
    """Start the local stack (idempotent): Redis, Kafka with its topics, and the layers' services.

    With TRENDS_STACK__INFRA=external, Redis and Kafka are yours (TRENDS_REDIS__URL, TRENDS_KAFKA__BOOTSTRAP):
    they are checked and the topics created, then only the product's services start.
    """
    from trends.stack import manager

    manager.up(Settings(), names=names, log=console.print)


@app.command()
def down() -> None:
    """Stop everything the local stack started, by PID (never external Redis or Kafka)."""
    from trends.stack import manager

    manager.down(Settings(), log=console.print)


@app.command()
def status() -> None:
    """Show what runs where (external Redis and Kafka as reachable or not)."""
    from trends.stack import manager

    colours = {"running": "green", "stopped": "dim", "stale": "yellow", "foreign": "red",
               manager.REACHABLE: "cyan", manager.UNREACHABLE: "red"}
    table = Table("component", "state", "pid", "address", "log")
    for row in manager.status(Settings()):
        colour = colours[row["state"]]
        table.add_row(row["name"], f"[{colour}]{row['state']}[/]", row["pid"], row["address"], row["log"])
    Console().print(table)


@app.command()
def gen(
    count: Annotated[Optional[int], typer.Option(help="Posts to send (default: until Ctrl-C).")] = None,
    duration: Annotated[Optional[float], typer.Option(help="Seconds to run.")] = None,
    rate: Annotated[Optional[float], typer.Option(help="Posts per second (default: as fast as possible).")] = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same stream.")] = 42,
    start: Annotated[Optional[str], typer.Option(help="Event time of the first post (RFC 3339; default now).")] = None,
    vocabulary: Annotated[int, typer.Option(help="Distinct tags (Zipf-distributed).")] = 1_000_000,
    late: Annotated[float, typer.Option(help="Share of posts that arrive minutes to hours late.")] = 0.02,
    duplicates: Annotated[float, typer.Option(help="Share of posts sent twice.")] = 0.01,
    malformed: Annotated[float, typer.Option(help="Share of malformed records.")] = 0.005,
    engagements: Annotated[float, typer.Option(help="Engagements per post.")] = 2.0,
    spike_at: Annotated[float, typer.Option(help="Seconds (event time) until the viral tag starts rising.")] = 60.0,
    truth: Annotated[Optional[Path], typer.Option(help="Write the ground truth into this folder.")] = None,
) -> None:
    """Stream realistic posts and engagements into Kafka, with a live rate and optional ground truth."""
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    from trendcore.events import parse_timestamp
    from trends.gen.model import GenConfig, Stream
    from trends.gen.run import produce

    now_ms = int(time.time() * 1000)
    start_ms = now_ms if start is None else parse_timestamp(start, "--start")
    event_rate = rate or 1000.0
    config = GenConfig(
        seed=seed, start_ms=start_ms, event_rate=event_rate, vocabulary=vocabulary, late_share=late,
        duplicate_share=duplicates, malformed_share=malformed, engagements_per_post=engagements,
        spike_at_s=spike_at, wall_now_ms=now_ms,
    )
    settings = Settings()
    stream = Stream(config)
    started = time.monotonic()
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("starting", total=count)

        def show(posts: int, records: int) -> None:
            rate_now = posts / max(1e-9, time.monotonic() - started)
            description = f"{posts:,} posts, {records:,} records, {rate_now:,.0f} posts/s"
            bar.update(task, completed=posts, description=description)

        result = produce(stream, settings, count=count, duration_s=duration, rate=rate, on_progress=show)
    if not result.stopped:
        console.print(
            f"sent {result.posts:,} posts ({result.records:,} records) in {result.seconds:.1f} s: "
            f"{result.posts_per_s:,.0f} posts/s"
        )
    if truth is not None:
        stream.truth.write(truth)
        console.print(f"ground truth written to {truth}")
    _exit_if_stopped(result)


def _exit_if_stopped(result: GenResult) -> None:
    """After Ctrl-C: one line on what was not delivered, then exit 130 (interrupted), without a traceback."""
    from trends.gen.run import stop_line

    if result.stopped:
        console.print(stop_line(result), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(INTERRUPTED)


@app.command()
def demo(
    rate: Annotated[float, typer.Option(
        help="Posts per second of the live stream (300 lets the archive keep up on 2 cores beside everything else)."
    )] = 300.0,
) -> None:
    """Start the whole stack, send an hour of history, then stream live posts (with a viral spike) until Ctrl-C."""
    from trends.demo import run

    _exit_if_stopped(run(Settings(), rate=rate, seed=int(time.time()) % 100_000, log=console.print))


@app.command()
def tail(
    topic: Annotated[str, typer.Argument(help="Topic to read, e.g. posts or dead-letters.")],
    n: Annotated[int, typer.Option("-n", help="How many records (0: follow until Ctrl-C).")] = 10,
    from_beginning: Annotated[bool, typer.Option(help="Read from the oldest record.")] = False,
) -> None:
    """Print records of a topic, one JSON line each (key, partition, offset, value)."""
    from kafka import TopicPartition

    from adapters import kafka as kafka_io

    settings = Settings()
    consumer = kafka_io.consumer(settings.kafka, consumer_timeout_ms=10_000 if n else float("inf"))
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    if not parts:
        raise TrendsError(f"topic {topic!r} does not exist on {settings.kafka.bootstrap}")
    consumer.assign(parts)
    if from_beginning:
        consumer.seek_to_beginning()
    else:
        ends = consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, max(0, ends[tp] - (n or 0)) if n else ends[tp])
    shown = 0
    try:
        for record in consumer:
            value = record.value.decode("utf-8", errors="replace")
            key = (record.key or b"").decode("utf-8", "replace")
            line = {"partition": record.partition, "offset": record.offset, "key": key, "value": value}
            sys.stdout.write(orjson.dumps(line).decode() + "\n")
            shown += 1
            if n and shown >= n:
                break
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()


@app.command()
def config() -> None:
    """Print the configuration reference (every TRENDS_ variable, its default and meaning) as Markdown."""
    from trends.configdoc import markdown

    sys.stdout.write(markdown())


@app.command()
def extract() -> None:
    """Read JSON Lines {"text": ...} on stdin; write {"tags": [...]} (counting keys) per line."""
    from trendcore.hashtags import tag_keys

    out = sys.stdout
    for number, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            text = orjson.loads(line)["text"]
            if not isinstance(text, str):
                raise TypeError
        except (orjson.JSONDecodeError, KeyError, TypeError):
            error = {"line": number, "error": 'expected a JSON object with a string "text"'}
            out.write(orjson.dumps(error).decode() + "\n")
            continue
        out.write(orjson.dumps({"tags": [key for key, _ in tag_keys(text)]}).decode() + "\n")


def main() -> None:
    """Console-script entry point: plain-words errors instead of tracebacks for our own errors."""
    try:
        app()
    except TrendsError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise SystemExit(1) from None

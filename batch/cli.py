"""`trends batch ...`: the batch jobs from the command line, with progress for long work."""

from __future__ import annotations

import shlex
import uuid
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from trendcore.settings import Settings
from trendcore.windows import day_date, parse_day, parse_hour

app = typer.Typer(help="Batch layer: archive Kafka into Delta Lake, exact counts, baselines, publish.",
                  no_args_is_help=True)
console = Console(stderr=True)


def _hour(text: str, option: str = "--hour") -> int:
    """The hour index of an option's value; a bad value is a usage error naming the option."""
    try:
        return parse_hour(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _day(text: str, option: str = "--date") -> int:
    """The day index of an option's value; a bad value is a usage error naming the option."""
    try:
        return parse_day(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _run_id(job: str) -> str:
    return f"cli-{job}-{uuid.uuid4().hex[:12]}"


def _spark(settings: Settings, job: str):
    from batch import session

    with console.status(f"starting Spark ({settings.spark.master})"):
        return session.get(settings, f"trends-batch-{job}")


def _show(result) -> None:
    rows = ", ".join(f"{name} {count:,}" for name, count in result.rows.items())
    phases = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in result.phases.items())
    hours = f"; hours rewritten {len(result.rewritten_hours)}" if result.job == "daily" else ""
    console.print(f"{result.job} {result.bucket}: {rows}{hours}; {result.published:,} Redis keys written, "
                  f"{result.unchanged:,} views unchanged; {result.seconds:.1f} s ({phases})")


@app.command()
def archive() -> None:
    """Drain Kafka (posts, engagements) into the Delta archive: bronze, quarantine, silver."""
    from batch import archive as archive_job

    settings = Settings()
    spark = _spark(settings, "archive")
    with console.status("archiving Kafka (availableNow)"):
        result = archive_job.run(spark, settings)
    console.print(f"archived {result.records:,} records in {result.batches} micro-batches into {settings.spark.lake}")


@app.command()
def hourly(hour: Annotated[str, typer.Option(help="UTC hour, e.g. 2026-11-29T19.")]) -> None:
    """Exact counts of one closed hour, published to Redis."""
    from batch import jobs

    bucket = _hour(hour)
    settings = Settings()
    spark = _spark(settings, "hourly")
    with console.status(f"hourly job for {hour}"):
        _show(jobs.hourly(spark, settings, bucket, _run_id("hourly")))


@app.command()
def daily(date: Annotated[str, typer.Option(help="UTC date, e.g. 2026-11-29.")]) -> None:
    """A whole UTC day: its hours again, daily counts, top posts, baselines, accuracy; published to Redis."""
    from batch import jobs

    day = _day(date)
    settings = Settings()
    spark = _spark(settings, "daily")
    with console.status(f"daily job for {date}"):
        _show(jobs.daily(spark, settings, day, _run_id("daily")))


@app.command()
def backfill(
    first: Annotated[str, typer.Option("--from", help="First UTC date.")],
    last: Annotated[str, typer.Option("--to", help="Last UTC date (inclusive).")],
) -> None:
    """Recompute and republish every day of a range (archive first if Kafka holds new records)."""
    from batch import jobs

    first_day, last_day = _day(first, "--from"), _day(last, "--to")
    settings = Settings()
    spark = _spark(settings, "backfill")
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} days"),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"backfill {first}..{last}", total=last_day - first_day + 1)

        def done(day: int, result) -> None:
            rows = result.rows.get("tag_counts_daily", 0)
            bar.update(task, advance=1, description=f"{day_date(day)}: {rows:,} daily rows")

        jobs.backfill(spark, settings, first_day, last_day, _run_id("backfill"), on_day=done)


@app.command()
def maintain(date: Annotated[str, typer.Option(help="UTC date whose partitions to compact.")]) -> None:
    """OPTIMIZE a day's partitions and VACUUM within retention."""
    from batch import jobs

    day = _day(date)
    settings = Settings()
    spark = _spark(settings, "maintain")
    with console.status(f"optimizing {date}"):
        report = jobs.maintain(spark, settings, day)
    for table, metrics in report.items():
        console.print(f"{table}: {metrics.get('numFilesRemoved', 0)} files -> {metrics.get('numFilesAdded', 0)}")


@app.command("class-archive")
def class_archive(force: Annotated[bool, typer.Option(help="Record it again even if it exists.")] = False) -> None:
    """Record the JVM class archive later jobs start from (a shorter JVM start); once per JDK and jar set."""
    from adapters.spark import class_archive_path
    from batch.class_archive import record

    settings = Settings()
    target = class_archive_path(settings)
    if target.exists() and not force:
        console.print(f"class archive up to date: {target}")
        return
    with console.status("recording the JVM class archive (the jobs on a few rows; about a minute)"):
        seconds = record(settings, target)
    console.print(f"class archive written: {target} ({target.stat().st_size / 1e6:.0f} MB, {seconds:.0f} s)")


@app.command("submit-cmd")
def submit_cmd(
    job_args: Annotated[list[str], typer.Argument(help="Job and options, e.g. hourly --hour 2026-11-29T19.")],
    master: Annotated[str | None, typer.Option(help="Spark master (default: TRENDS_SPARK__MASTER).")] = None,
) -> None:
    """Print the spark-submit command line of a job: the jars, the code zip (--py-files), every --conf.

    Run it with the TRENDS_* settings in the environment (the driver reads them): `trends batch submit` does both.
    """
    from batch.session import submit_argv

    print(shlex.join(submit_argv(Settings(), *job_args, master=master)))


@app.command("submit")
def submit(
    job_args: Annotated[list[str], typer.Argument(help="Job and options, e.g. hourly --hour 2026-11-29T19.")],
) -> None:
    """Run a job through spark-submit on TRENDS_SPARK__MASTER, as Airflow does, and print its result as JSON.

    `trends batch submit -- hourly --hour 2026-11-29T19`: the driver runs here, the executors on the cluster.
    """
    import json

    from batch.session import submit as run

    print(json.dumps(run(Settings(), *job_args)))  # spark-submit's log goes to stderr as it comes

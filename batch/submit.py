"""spark-submit entry point: `spark-submit [--master URL] batch/submit.py hourly --hour 2026-11-29T19`.

The same jobs as `trends batch ...`, without rich output: one JSON line with the result.
Build the full command line with `trends batch submit-cmd ...` (the jars, the code zip, every --conf), or run
it with `trends batch submit ...`; Airflow's tasks run it through `batch.session.submit`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Parse the job and its bucket, run it on spark-submit's session, print its result as JSON."""
    from batch import archive, jobs, session
    from trendcore.settings import Settings

    parser = argparse.ArgumentParser(prog="batch/submit.py")
    parser.add_argument("job", choices=["archive", "hourly", "daily", "maintain", "backfill"])
    parser.add_argument("--hour", help="hour of the hourly job, e.g. 2026-11-29T19")
    parser.add_argument("--date", help="UTC date of the daily or maintain job, e.g. 2026-11-29")
    parser.add_argument("--from", dest="first", help="first date of a backfill")
    parser.add_argument("--to", dest="last", help="last date of a backfill (inclusive)")
    parser.add_argument("--run-id", default=f"submit-{uuid.uuid4().hex[:12]}")
    args = parser.parse_args(argv)
    try:
        buckets = job_buckets(args)
    except ValueError as exc:
        parser.error(str(exc))  # usage and the message on stderr, exit 2: before any Spark starts
    settings = Settings()
    spark = session.get(settings, f"trends-batch-{args.job}")
    if args.job == "archive":
        out: object = archive.run(spark, settings)
    elif args.job == "hourly":
        out = jobs.hourly(spark, settings, *buckets, args.run_id)
    elif args.job == "daily":
        out = jobs.daily(spark, settings, *buckets, args.run_id)
    elif args.job == "maintain":
        out = jobs.maintain(spark, settings, *buckets)
    else:
        out = jobs.backfill(spark, settings, *buckets, args.run_id)
    print(json.dumps(_plain(out), default=str), flush=True)  # e.g. OPTIMIZE metrics may hold other types
    spark.stop()
    return 0


def job_buckets(args: argparse.Namespace) -> list[int]:
    """The bucket indexes a job's options name, in the order the job takes them (none for the archive).

    ValueError saying which option is missing or malformed.
    """
    from trendcore.windows import parse_day, parse_hour

    options: dict[str, list[tuple[str, str | None, Callable[[str], int]]]] = {
        "archive": [],
        "hourly": [("--hour", args.hour, parse_hour)],
        "daily": [("--date", args.date, parse_day)],
        "maintain": [("--date", args.date, parse_day)],
        "backfill": [("--from", args.first, parse_day), ("--to", args.last, parse_day)],
    }
    buckets = []
    for option, value, parse in options[args.job]:
        if value is None:
            raise ValueError(f"{args.job} needs {option}")
        try:
            buckets.append(parse(value))
        except ValueError as exc:
            raise ValueError(f"argument {option}: {exc}") from None
    return buckets


def _plain(value: object) -> object:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


if __name__ == "__main__":
    # spark-submit puts this file's folder first on sys.path, where batch/delta.py would shadow the
    # `delta` package: put the project root there instead.
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p not in ("", here) and Path(p).resolve() != Path(here)]
    sys.path.insert(0, str(Path(here).parent))
    sys.exit(main())

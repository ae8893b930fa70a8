"""Thin Delta Lake I/O: read, replace a partition (replaceWhere), append (once per batch), OPTIMIZE/VACUUM.

Every Spark or Delta failure leaves here as a ServiceError saying what we were doing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from batch.tables import PARTITIONS, SORTED_BY, Lake
from trendcore.errors import ServiceError, TrendsError


@contextmanager
def spark_errors(action: str) -> Iterator[None]:
    """Re-raise Spark, Delta and Py4J errors as ServiceError (ours pass through)."""
    try:
        yield
    except TrendsError:
        raise
    except Exception as exc:  # pyspark raises many unrelated types (CapturedException, Py4JJavaError, ...)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServiceError(f"Spark: {action} failed: {first}") from exc


def exists(spark: SparkSession, lake: Lake, table: str) -> bool:
    """True when the Delta table has been created."""
    from delta.tables import DeltaTable

    with spark_errors(f"checking {table}"):
        return DeltaTable.isDeltaTable(spark, lake.path(table))


def read(spark: SparkSession, lake: Lake, table: str, pinned: bool = False) -> DataFrame:
    """The current version of a table; `pinned` reads it as of that version, so that every query of the
    returned frame sees the same snapshot even while the archive appends."""
    with spark_errors(f"reading {table}"):
        reader = spark.read.format("delta")
        if pinned:
            from delta.tables import DeltaTable

            version = DeltaTable.forPath(spark, lake.path(table)).history(1).collect()[0]["version"]
            reader = reader.option("versionAsOf", version)
        return reader.load(lake.path(table))


def replace(df: DataFrame, lake: Lake, table: str, where: str) -> None:
    """Atomically replace the rows matching `where` by `df` (creating the table if missing): idempotent.
    The rows of each file are sorted by the table's SORTED_BY columns, if any."""
    if table in SORTED_BY:
        df = df.sortWithinPartitions(*SORTED_BY[table])
    with spark_errors(f"replacing {where} in {table}"):
        writer = df.write.format("delta").mode("overwrite").partitionBy(*PARTITIONS[table])
        if exists(df.sparkSession, lake, table):
            writer = writer.option("replaceWhere", where)
        writer.save(lake.path(table))


def append_once(df: DataFrame, lake: Lake, table: str, app_id: str, version: int, add_columns: bool = False) -> None:
    """Append `df` unless (app_id, version) was already committed: a re-run micro-batch is skipped. With
    `add_columns`, columns the table lacks are added to it (older rows read them as null)."""
    with spark_errors(f"appending to {table}"):
        writer = (
            df.write.format("delta").mode("append").partitionBy(*PARTITIONS[table])
            .option("txnAppId", app_id).option("txnVersion", version)
        )
        if add_columns:
            writer = writer.option("mergeSchema", "true")
        writer.save(lake.path(table))


def append(df: DataFrame, lake: Lake, table: str) -> None:
    """Append `df` (creating the table if missing), with no idempotency key: for rows the caller found
    missing from the table, so that a second call finds none."""
    with spark_errors(f"appending to {table}"):
        df.write.format("delta").mode("append").partitionBy(*PARTITIONS[table]).save(lake.path(table))


def optimize(spark: SparkSession, lake: Lake, table: str, where: str | None = None) -> dict:
    """Compact small files (OPTIMIZE, optionally one partition); returns Delta's metrics."""
    from delta.tables import DeltaTable

    with spark_errors(f"optimizing {table}"):
        builder = DeltaTable.forPath(spark, lake.path(table)).optimize()
        if where:
            builder = builder.where(where)
        row = builder.executeCompaction().collect()[0]
        return row.asDict(recursive=True)["metrics"]


def vacuum(spark: SparkSession, lake: Lake, table: str, retain_hours: int) -> None:
    """Delete files no version within `retain_hours` needs (Delta 4.4 logs that it uses the table's
    delta.deletedFileRetentionDuration instead, 7 days by default)."""
    from delta.tables import DeltaTable

    with spark_errors(f"vacuuming {table}"):
        DeltaTable.forPath(spark, lake.path(table)).vacuum(retain_hours)


def footprint(spark: SparkSession, lake: Lake, table: str) -> tuple[int, int]:
    """(bytes, files) of the table's current version."""
    from delta.tables import DeltaTable

    with spark_errors(f"describing {table}"):
        row = DeltaTable.forPath(spark, lake.path(table)).detail().collect()[0]
        return int(row["sizeInBytes"]), int(row["numFiles"])

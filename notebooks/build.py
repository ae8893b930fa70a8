"""Writes the analysts' notebooks from the cell sources below (stored without outputs).

Run: .venv/bin/python notebooks/build.py   (the .ipynb files are what analysts open in Jupyter)
Each notebook's first code cell is tagged `parameters` (papermill): `lake` is the Delta root; empty, the
configured one (TRENDS_SPARK__LAKE, else $TRENDS_HOME/lake); relative, under TRENDS_HOME; a URI
(s3a://bucket/prefix) as given, with S3's endpoint and keys from TRENDS_SPARK__CONF (`spark.hadoop.fs.s3a.*`).
The kernel runs in notebooks/, so `make notebooks` points TRENDS_HOME at the checkout's var/.
`lake_without_spark` reads the tables with delta-rs (`deltalake`) and pandas: no JVM, for analysts without Spark.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).parent

LAKE = 'lake = ""  # empty: the configured lake (TRENDS_SPARK__LAKE, else $TRENDS_HOME/lake)\n'

SETUP_BODY = '''
configured = Settings()  # the server's TRENDS_* (`make notebooks`: TRENDS_HOME is the checkout's var/)
lake = resolve(lake, configured.home, configured.spark.lake)  # relative: under TRENDS_HOME; a URI as given
settings = Settings(spark={"lake": lake, "master": master})
spark = spark_session(settings, "notebook")


def table(name):
    """A Delta table of the lake."""
    return spark.read.format("delta").load(join(lake, name))'''

NO_JVM_SETUP = '''import sys

import pandas as pd
import pyarrow as pa
from deltalake import DeltaTable

from trendcore.lake import delta_rs_storage_options, join, resolve
from trendcore.settings import Settings

configured = Settings()  # the server's TRENDS_*: the lake, and S3's endpoint and keys in spark.conf
lake = resolve(lake, configured.home, configured.spark.lake)  # relative: under TRENDS_HOME; a URI as given
options = delta_rs_storage_options(lake, configured.spark.conf)


def table(name, **read):
    """A Delta table of the lake as a pandas frame, read by delta-rs (`partitions`, `columns`, `filters` pass
    through to DeltaTable.to_pandas, so a large table is read only where asked)."""
    return DeltaTable(join(lake, name), storage_options=options).to_pandas(**read)'''


def setup(*imports: str) -> str:
    """The setup cell: its imports (the notebook's own plus the session's, sorted), then the Spark session."""
    ours = sorted({*imports, "from adapters.spark import spark_session", "from trendcore.lake import join, resolve",
                   "from trendcore.settings import Settings"})
    third = sorted((line for line in ours if line.startswith(("from pyspark", "import "))),
                   key=lambda line: (line.startswith("from"), line))
    first = [line for line in ours if line not in third]
    return "\n".join(third) + "\n\n" + "\n".join(first) + "\n" + SETUP_BODY


NOTEBOOKS = {
    "explore_trends": [
        new_markdown_cell("# Explore trends\nTop tags per day and region, one tag's hourly series against its "
                          "baseline, and its rise score over a day. Data: the batch layer's gold tables."),
        new_code_cell(LAKE + 'master = "local[2]"\nregion = "all"\ntag = ""  # empty: the day\'s top tag\n'
                      "a, b = 5.0, 10.0  # rise = (count + a) / (baseline + b)", metadata={"tags": ["parameters"]}),
        new_code_cell(setup("import matplotlib.pyplot as plt", "from pyspark.sql import functions as F",
                            "from batch.transforms import hour_of_week")),
        new_markdown_cell("## Top tags per day and region"),
        new_code_cell('daily = table("tag_counts_daily")\n'
                      'days = [r.date for r in daily.select("date").distinct().orderBy("date").collect()]\n'
                      "day = days[-1]\n"
                      'top = (daily.where(F.col("date") == day).groupBy("region")\n'
                      '       .agg(F.max_by("tag", "mentions").alias("top_tag"), F.max("mentions").alias("mentions"))\n'
                      '       .orderBy(F.desc("mentions")))\n'
                      "top_per_region = top.toPandas()\n"
                      "top_per_region"),
        new_code_cell('leaders = (daily.where((F.col("date") == day) & (F.col("region") == region))\n'
                      '           .orderBy(F.desc("mentions"), "tag").limit(10).toPandas())\n'
                      "tag = tag or leaders.tag[0]\n"
                      'ax = leaders.plot.barh(x="tag", y="mentions", legend=False, '
                      'title=f"top tags on {day} ({region})")\n'
                      "ax.invert_yaxis()\n"
                      "print('top tag:', tag)"),
        new_markdown_cell("## One tag's hourly series against its baseline"),
        new_code_cell('hourly = (table("tag_counts_hourly")'
                      '.where((F.col("tag") == tag) & (F.col("region") == region))\n'
                      '          .withColumn("hour_of_week", hour_of_week(F.col("hour"))))\n'
                      'baselines = (table("trend_baselines")'
                      '.where((F.col("tag") == tag) & (F.col("region") == region))\n'
                      '             .groupBy("hour_of_week").agg(F.max("expected").alias("baseline")))\n'
                      'series = (hourly.join(baselines, "hour_of_week", "left").fillna({"baseline": 0.0})\n'
                      '          .orderBy("hour").select("hour", "mentions", "baseline").toPandas())\n'
                      'series["rise"] = (series.mentions + a) / (series.baseline + b)\n'
                      "series"),
        new_code_cell('fig, (top_ax, rise_ax) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))\n'
                      'top_ax.plot(series.hour, series.mentions, label="mentions")\n'
                      'top_ax.plot(series.hour, series.baseline, "--", label="baseline")\n'
                      'top_ax.set_title(f"#{tag} per hour ({region})")\n'
                      "top_ax.legend()\n"
                      'rise_ax.plot(series.hour, series.rise, color="tab:red")\n'
                      'rise_ax.set_title("rise score")\n'
                      'rise_ax.set_xlabel("hour (epoch hours, UTC)")\n'
                      "fig.tight_layout()"),
    ],
    "speed_vs_exact": [
        new_markdown_cell("# Speed layer against exact counts\nThe shadow-mode comparison of `speed_accuracy`: "
                          "per closed hour and region, the sketch estimates of the exact top tags, their error "
                          "against the eps * N bound, and the top-10 recall."),
        new_code_cell(LAKE + 'master = "local[2]"', metadata={"tags": ["parameters"]}),
        new_code_cell(setup()),
        new_code_cell('accuracy = table("speed_accuracy").where("sketch_present").toPandas()\n'
                      'accuracy["error_over_bound"] = accuracy.max_error / accuracy.error_bound.clip(lower=1)\n'
                      'summary = {"hours": accuracy.hour.nunique(), "rows": len(accuracy),\n'
                      '           "within_bound": float(accuracy.within_bound.mean()) if len(accuracy) else None,\n'
                      '           "undercounts": int(accuracy.undercounts.sum()) if len(accuracy) else 0,\n'
                      '           "top10_recall": float(accuracy.top10_recall.mean()) if len(accuracy) else None}\n'
                      "summary"),
        new_markdown_cell("## Error distribution against the eps * N bound\nAn estimate never undercounts; "
                          "its error should stay under eps * N in at least 1 - delta of queries."),
        new_code_cell('ax = accuracy.error_over_bound.plot.hist('
                      'bins=20, title="max error / (eps * N) per hour and region")\n'
                      'ax.axvline(1.0, color="red", linestyle="--")'),
        new_markdown_cell("## Top-10 recall per hour"),
        new_code_cell('recall = accuracy.groupby("hour").top10_recall.mean()\n'
                      'recall.plot(marker="o", ylim=(0, 1.05), title="top-10 recall (mean over regions)")'),
        new_markdown_cell("## Worst misses"),
        new_code_cell('worst = accuracy.sort_values("error_over_bound", ascending=False).head(10)\n'
                      'worst[["hour", "region", "exact_total", "speed_total", "error_bound", "max_error", '
                      '"top10_recall"]]'),
    ],
    "tag_lookup": [
        new_markdown_cell("# Tag lookup\nOne tag through the silver `mentions` table (the inverted index): its "
                          "posts over time, its regions, its top posts."),
        new_code_cell(LAKE + 'master = "local[2]"\ntag = "#WorldCup"', metadata={"tags": ["parameters"]}),
        new_code_cell(setup("from pyspark.sql import functions as F", "from trendcore.hashtags import normalize_tag")
                      + "\n\n"
                      'key = normalize_tag(tag.lstrip("#＃"))  # any spelling: the same key as ingestion\n'
                      'mentions = table("mentions").where(F.col("tag") == key).cache()\n'
                      "print(key, mentions.count(), 'mentions')"),
        new_markdown_cell("## Posts over time"),
        new_code_cell('per_hour = mentions.groupBy("hour").count().orderBy("hour").toPandas()\n'
                      'per_hour.plot(x="hour", y="count", marker="o", legend=False, '
                      'title=f"posts with #{key} per hour")\n'
                      "per_hour"),
        new_markdown_cell("## Regions"),
        new_code_cell('regions = mentions.groupBy("region").count().orderBy(F.desc("count")).toPandas()\n'
                      'regions.plot.bar(x="region", y="count", legend=False, title="mentions by region")\n'
                      "regions"),
        new_markdown_cell("## Top posts"),
        new_code_cell('top_posts = (table("top_posts_daily")'
                      '.where((F.col("tag") == key) & (F.col("region") == "all"))\n'
                      '             .join(table("posts").select("post_id", "text", "user_id"), "post_id", "left")\n'
                      '             .orderBy("date", "rank")'
                      '.select("date", "rank", "post_id", "score", "text").toPandas())\n'
                      "top_posts"),
    ],
    "lake_without_spark": [
        new_markdown_cell("# The lake without Spark\nThe gold tables read by delta-rs (`deltalake`) into pandas: "
                          "no JVM and no Spark, a local lake or one on S3 alike. The day's top tags per region, "
                          "one tag's hours, and what each table holds."),
        new_code_cell(LAKE + 'region = "all"\ntag = ""  # empty: the day\'s top tag',
                      metadata={"tags": ["parameters"]}),
        new_code_cell(NO_JVM_SETUP),
        new_markdown_cell("## Top tags per day and region"),
        new_code_cell('days = sorted(table("tag_counts_daily", columns=["date"]).date.unique())\n'
                      "day = days[-1]\n"
                      'daily = table("tag_counts_daily", partitions=[("date", "=", str(day))])\n'
                      'top = (daily.sort_values(["mentions", "tag"], ascending=[False, True])\n'
                      '       .groupby("region", as_index=False).first()[["region", "tag", "mentions"]]\n'
                      '       .sort_values("mentions", ascending=False))\n'
                      "tag = tag or top.set_index(\"region\").tag[region]\n"
                      "print('top tag:', tag)\n"
                      "top"),
        new_markdown_cell("## One tag's hours"),
        new_code_cell('hours = table("tag_counts_hourly", partitions=[("date", "=", str(day))],\n'
                      '              filters=[("tag", "=", tag), ("region", "=", region)])\n'
                      'hours = hours.sort_values("hour")[["hour", "mentions", "distinct_authors"]]\n'
                      "print('hours:', len(hours), 'mentions:', int(hours.mentions.sum()))\n"
                      "hours"),
        new_markdown_cell("## What each table holds\nRows and files of the current version, read from the Delta "
                          "log alone (no data file is opened)."),
        new_code_cell('names = ["tag_counts_hourly", "tag_counts_daily", "top_posts_daily", "trend_baselines", '
                      '"speed_accuracy"]\n'
                      "tables = pd.DataFrame([\n"
                      '    {"table": name, "version": t.version(), "files": len(t.file_uris()),\n'
                      '     "rows": int(pa.table(t.get_add_actions(flatten=True))["num_records"].to_pandas().sum())}\n'
                      "    for name in names for t in [DeltaTable(join(lake, name), storage_options=options)]])\n"
                      "print('jvm:', 'pyspark' in sys.modules)\n"
                      "tables"),
    ],
}


def build() -> None:
    """Write every notebook, with no outputs."""
    for name, cells in NOTEBOOKS.items():
        for number, cell in enumerate(cells):
            cell.id = f"{name}-{number}"  # stable ids: rebuilding changes nothing in git
        notebook = new_notebook(cells=cells)
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(notebook, HERE / f"{name}.ipynb")


if __name__ == "__main__":
    build()

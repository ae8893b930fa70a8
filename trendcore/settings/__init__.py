"""One settings model for every deployable, read from the environment (prefix TRENDS_).

Nested fields use a double underscore: TRENDS_KAFKA__BOOTSTRAP=broker:9092,
TRENDS_REDIS__URL=redis://cache:6379/0, TRENDS_SPARK__MASTER=spark://master:7077. A `.env` file in
the working directory is read too. Entry points build one `Settings()` and pass it down; nothing
reads the environment anywhere else.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trendcore.cms import SketchShape
from trendcore.settings.batch import AirflowSettings, BatchSettings
from trendcore.settings.paths import PROJECT_ROOT
from trendcore.settings.serving import ApiSettings
from trendcore.settings.speed import SpeedSettings

__all__ = ["PROJECT_ROOT", "Settings", "to_env"]


class StackSettings(BaseModel):
    """Where the local stack keeps its state; only `trends up/down/status` use these."""

    home: Path = Field(PROJECT_ROOT / "var", description="Data, logs and PID files of the local stack.")
    jars: Path = Field(PROJECT_ROOT / ".cache" / "jars", description="Maven-resolved Kafka and Delta jars.")
    kafka_controller_port: int = Field(19093, description="KRaft controller port of the local broker.")
    kafka_heap: str = Field("-Xms256m -Xmx1g", description="JVM heap flags of the local broker.")
    start_timeout_s: float = Field(60.0, description="How long to wait for a service to accept connections.")


class KafkaSettings(BaseModel):
    bootstrap: str = Field("127.0.0.1:19092", description="Kafka bootstrap servers (comma separated).")
    partitions: int = Field(4, ge=1, description="Partitions of each topic the stack creates.")
    posts_topic: str = Field("posts", description="Topic of post records.")
    engagements_topic: str = Field("engagements", description="Topic of engagement records.")
    dead_letter_topic: str = Field("dead-letters", description="Where invalid records go, with the reason.")
    request_timeout_ms: int = Field(30_000, description="Kafka client request timeout.")

    @property
    def topics(self) -> list[str]:
        return [self.posts_topic, self.engagements_topic, self.dead_letter_topic]

    @property
    def host_port(self) -> tuple[str, int]:
        """The first bootstrap server as (host, port)."""
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        return host, int(port)


class RedisSettings(BaseModel):
    url: str = Field("redis://127.0.0.1:16379/0", description="Redis URL (redis:// or rediss://).")
    retries: int = Field(5, ge=0, description="Retries with exponential backoff on connection errors.")


class SparkSettings(BaseModel):
    master: str = Field("local[2]", description="Spark master URL: local[*] or spark://host:7077.")
    lake: Path = Field(PROJECT_ROOT / "var" / "lake", description="Root of the Delta tables (any Hadoop path).")
    driver_memory: str = Field("2g", description="Spark driver memory (local mode: all of Spark).")
    shuffle_partitions: int = Field(
        4, ge=1, description="spark.sql.shuffle.partitions, and the partitions the exact counts are computed in "
        "(each held by one Python worker: about 40 bytes a mention); small for 2 cores.")
    class_archive: bool = Field(
        True, description="Start the driver JVM from the class archive `trends batch class-archive` wrote for "
        "this JDK and these jars, when there is one (about 10 s less per job start; docs/batch.md).")


class SketchSettings(BaseModel):
    eps: float = Field(0.001, gt=0, lt=1, description="Count-min error: estimate <= true + eps * N.")
    delta: float = Field(0.01, gt=0, lt=1, description="Probability that the eps bound fails.")

    @property
    def shape(self) -> SketchShape:
        return SketchShape.from_error(self.eps, self.delta)


class ValidationSettings(BaseModel):
    max_future_s: int = Field(300, ge=0, description="Records dated further ahead than this are refused.")


class Settings(BaseSettings):
    """Every knob of the project. Build once in an entry point; pass it down."""

    model_config = SettingsConfigDict(
        env_prefix="TRENDS_", env_nested_delimiter="__", env_file=".env", extra="ignore"
    )

    stack: StackSettings = StackSettings()
    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    spark: SparkSettings = SparkSettings()
    sketch: SketchSettings = SketchSettings()
    validation: ValidationSettings = ValidationSettings()
    speed: SpeedSettings = SpeedSettings()
    batch: BatchSettings = BatchSettings()
    airflow: AirflowSettings = AirflowSettings()
    api: ApiSettings = ApiSettings()

    @field_validator("kafka")
    @classmethod
    def _distinct_topics(cls, kafka: KafkaSettings) -> KafkaSettings:
        if len(set(kafka.topics)) != 3:
            raise ValueError("posts, engagements and dead-letter topics must differ")
        return kafka


def to_env(settings: Settings) -> dict[str, str]:
    """The settings as TRENDS_SECTION__FIELD variables, so a process we start builds the same Settings().

    One variable a field (not one JSON value a section) so that, merged over a parent's environment,
    every field of `settings` wins over the parent's own TRENDS_ variables.
    """
    env: dict[str, str] = {}

    def walk(model: BaseModel, path: str) -> None:
        for name in type(model).model_fields:
            value = getattr(model, name)
            key = f"{path}{name.upper()}"
            if isinstance(value, BaseModel):
                walk(value, key + "__")
            elif isinstance(value, bool):
                env[key] = str(value).lower()
            elif isinstance(value, (dict, list)):
                env[key] = json.dumps(value)
            elif value is not None:
                env[key] = str(value)

    walk(settings, "TRENDS_")
    return env

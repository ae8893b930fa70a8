"""One settings model for every deployable, read from the environment (prefix TRENDS_).

Nested fields use a double underscore: TRENDS_KAFKA__BOOTSTRAP=broker:9092,
TRENDS_REDIS__URL=redis://cache:6379/0, TRENDS_SPARK__MASTER=spark://master:7077. A `.env` file in
the working directory is read too. Entry points build one `Settings()` and pass it down; nothing
reads the environment anywhere else. A TRENDS_ variable that names no setting stops `Settings()`
(ConfigError naming the nearest real one): a misspelt knob must not be silently ignored.

Every path defaults to a place under one data directory, TRENDS_HOME (default `./var` of the working
directory), unless it is set itself (paths.py).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from trendcore.cms import SketchShape
from trendcore.errors import ConfigError
from trendcore.settings.batch import AirflowSettings, BatchSettings
from trendcore.settings.paths import DEFAULT_HOME, absolute, place_under, under_home
from trendcore.settings.serving import ApiSettings
from trendcore.settings.speed import SpeedSettings

__all__ = ["ENV_PREFIX", "Settings", "env_names", "to_env"]

ENV_PREFIX = "TRENDS_"
NESTED = "__"


class StackSettings(BaseModel):
    """Where the local stack keeps its state; only `trends up/down/status` use these."""

    home: Path = under_home(".", "Data, logs and PID files of the local stack.")
    jars: Path = under_home("jars", "Maven-resolved Kafka and Delta jars, and the JVM class archive "
                            "(scripts/bootstrap.sh writes them here).")
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
    lake: Path = under_home("lake", "Root of the Delta tables (any Hadoop path).")
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
        env_prefix=ENV_PREFIX, env_nested_delimiter=NESTED, env_file=".env", extra="ignore"
    )

    home: Path = Field(DEFAULT_HOME, description="Data directory: every path default below is under it "
                       "(relative: to the working directory; made absolute when the settings are read).")
    stack: StackSettings = Field(default_factory=StackSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    redis: RedisSettings = Field(default_factory=RedisSettings)
    spark: SparkSettings = Field(default_factory=SparkSettings)
    sketch: SketchSettings = Field(default_factory=SketchSettings)
    validation: ValidationSettings = Field(default_factory=ValidationSettings)
    speed: SpeedSettings = Field(default_factory=SpeedSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    airflow: AirflowSettings = Field(default_factory=AirflowSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, plus a check that every TRENDS_ variable they saw names a setting."""
        check = _RefuseUnknownNames(settings_cls, env_settings, dotenv_settings)
        return check, init_settings, env_settings, dotenv_settings, file_secret_settings

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        return absolute(home)

    @field_validator("kafka")
    @classmethod
    def _distinct_topics(cls, kafka: KafkaSettings) -> KafkaSettings:
        if len(set(kafka.topics)) != 3:
            raise ValueError("posts, engagements and dead-letter topics must differ")
        return kafka

    @model_validator(mode="after")
    def _paths_under_home(self) -> Settings:
        """Each path default no one set goes under `home` (an explicitly set path wins)."""
        for name in type(self).model_fields:
            section = getattr(self, name)
            if isinstance(section, BaseModel):
                setattr(self, name, place_under(section, self.home))
        return self


def env_names(model: type[BaseModel] = Settings, prefix: str = ENV_PREFIX) -> set[str]:
    """Every variable name that sets something: a section (a JSON value) and each field in it, upper case."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}".upper()
        names.add(key)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names |= env_names(field.annotation, key + NESTED)
    return names


def _nearest(name: str, known: set[str]) -> str | None:
    """The known name `name` most likely meant: one with the same last part first (a field in the wrong
    section, TRENDS_BATCH__CATCHUP for TRENDS_AIRFLOW__CATCHUP), else the closest spelling (difflib)."""
    leaf = name.removeprefix(ENV_PREFIX).rpartition(NESTED)[2]
    same_leaf = [k for k in known if k.removeprefix(ENV_PREFIX).rpartition(NESTED)[2] == leaf]
    found = difflib.get_close_matches(name, same_leaf, n=1, cutoff=0.0) or difflib.get_close_matches(name, known, n=1)
    return found[0] if found else None


def refuse_unknown(names: Iterable[str], known: set[str] | None = None) -> None:
    """Raise ConfigError when a TRENDS_ name (any case, as pydantic-settings reads them) names no setting."""
    known = env_names() if known is None else known
    unknown = sorted({n.upper() for n in names if n.upper().startswith(ENV_PREFIX)} - known)
    if unknown:
        hints = []
        for name in unknown:
            nearest = _nearest(name, known)
            hints.append(f"{name} (did you mean {nearest}?)" if nearest else name)
        raise ConfigError(f"unknown setting{'s' if len(unknown) > 1 else ''}: {', '.join(hints)}; "
                          "every variable is listed in docs/configuration.md (`trends config`)")


class _RefuseUnknownNames(PydanticBaseSettingsSource):
    """Reads no value: refuses the TRENDS_ variables of the environment and the .env file that name no setting."""

    def __init__(self, settings_cls: type[BaseSettings], *sources: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.sources = sources

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        names = [name for source in self.sources for name in getattr(source, "env_vars", {})]
        refuse_unknown(names, env_names(self.settings_cls))
        return {}


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
                walk(value, key + NESTED)
            elif isinstance(value, bool):
                env[key] = str(value).lower()
            elif isinstance(value, (dict, list)):
                env[key] = json.dumps(value)
            elif value is not None:
                env[key] = str(value)

    walk(settings, ENV_PREFIX)
    return env

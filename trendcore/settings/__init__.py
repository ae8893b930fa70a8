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
from typing import Annotated, Any
from urllib.parse import parse_qs, urlparse

from pydantic import BaseModel, Field, PlainValidator, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from trendcore import kafka_config
from trendcore.cms import SketchShape
from trendcore.errors import ConfigError
from trendcore.kafka_config import ClientSecurity
from trendcore.lake import LakeRoot, validate_lake
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
    kafka_sasl_port: int | None = Field(
        None, description="Port of a second, SASL_SSL listener of the local broker (off when unset): SCRAM user "
        "`trends` with a password made at first start, and a CA and broker certificate made at start, all in "
        "kafka/tls under the stack home.")
    redis_tls_port: int | None = Field(
        None, description="Port of a TLS listener of the local Redis beside its plain one (off when unset), with a "
        "CA and server certificate for 127.0.0.1 made at first start in redis/tls under the stack home: point "
        "TRENDS_REDIS__URL at rediss://127.0.0.1:<port>/0 and TRENDS_REDIS__CA_FILE at its ca.crt.")
    redis_maxmemory: str = Field(
        "4gb", pattern=r"^[0-9]+(b|kb|mb|gb)?$",
        description="`maxmemory` of the local Redis (each cluster node), with `noeviction`: when full, Redis refuses "
        "writes (the speed layer retries, nothing is evicted) instead of the kernel's OOM killer ending it. "
        "redis-server units: `4gb`, `512mb`.")
    redis_cluster_ports: list[int] | None = Field(
        None, description="Ports of a local Redis Cluster of that many masters (at least 3, no replicas), "
        "started by `trends up` instead of the single Redis, each node in redis-cluster/<port> under the stack "
        "home; unset: the single Redis. Set TRENDS_REDIS__MODE=cluster and TRENDS_REDIS__URL to "
        "redis://127.0.0.1:<one of them>/0 with it. As JSON, e.g. `[17001, 17002, 17003]`.")
    redis_cluster_bus_ports: list[int] | None = Field(
        None, description="The cluster bus ports of those nodes, one each in the same order; unset: each port + "
        "10000 (Redis's default). Set them when port + 10000 falls in the kernel's ephemeral range "
        "(net.ipv4.ip_local_port_range, 32768-60999 by default), where any outgoing connection may hold it.")
    start_timeout_s: float = Field(60.0, description="How long to wait for a service to accept connections.")
    infra: str = Field(
        "local", pattern=r"^(local|external)$",
        description="Who runs Redis and Kafka: `local` (`trends up` starts them, `trends down` stops them) or "
        "`external` (yours, at TRENDS_REDIS__URL and TRENDS_KAFKA__BOOTSTRAP: `trends up` checks they answer, "
        "creates the topics and starts only the product's services; `trends down` never touches them).")

    @field_validator("redis_cluster_ports")
    @classmethod
    def _cluster_of_three(cls, ports: list[int] | None) -> list[int] | None:
        """redis-cli --cluster create needs three masters at least, on distinct ports."""
        if ports is not None and (len(ports) < 3 or len(set(ports)) != len(ports)):
            raise ConfigError(f"TRENDS_STACK__REDIS_CLUSTER_PORTS={ports}: a cluster needs at least 3 distinct ports")
        return ports

    @model_validator(mode="after")
    def _a_bus_port_a_node(self) -> "StackSettings":
        """Bus ports, when given, pair one to one with the node ports."""
        bus = self.redis_cluster_bus_ports
        if bus is not None and len(bus) != len(self.redis_cluster_ports or []):
            raise ConfigError(f"TRENDS_STACK__REDIS_CLUSTER_BUS_PORTS={bus}: give one bus port for each of "
                              f"TRENDS_STACK__REDIS_CLUSTER_PORTS={self.redis_cluster_ports}")
        return self


class KafkaSettings(BaseModel):
    bootstrap: str = Field("127.0.0.1:19092", description="Kafka bootstrap servers (comma separated).")
    client: dict[str, str] = Field(
        {}, description="Client security under Kafka's own property names, one JSON object, e.g. "
        '`{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "trends", '
        '"ssl.ca.location": "/etc/kafka/ca.pem"}`; every client (consumers, admin, producer, Spark) gets it in its '
        "own dialect. Also `ssl.endpoint.identification.algorithm` (https or none). The password goes in "
        "TRENDS_KAFKA__SASL_PASSWORD.")
    sasl_password: SecretStr | None = Field(None, description="The SASL password of `sasl.username` (a secret: "
                                            "never logged; passed on to the processes the stack starts).")
    partitions: int = Field(4, ge=1, description="Partitions of each topic `trends up` and "
                            "`trends kafka create-topics` create.")
    replication_factor: int = Field(1, ge=1, description="Replicas of each topic created (at most the brokers).")
    min_insync_replicas: int = Field(1, ge=1, description="min.insync.replicas of each topic created: with acks=all, "
                                     "a write needs this many replicas (at most replication_factor).")
    retention_ms: int = Field(604_800_000, ge=-1, description="retention.ms of each topic created (-1: forever); "
                              "keep it above a day: the speed layer replays 24 h after Redis loses data.")
    posts_topic: str = Field("posts", description="Topic of post records.")
    engagements_topic: str = Field("engagements", description="Topic of engagement records.")
    dead_letter_topic: str = Field("dead-letters", description="Where invalid records go, with the reason.")
    request_timeout_ms: int = Field(30_000, description="Kafka client request timeout.")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSettings:
        """Refuse (ConfigError) client properties some client could not use, and more in-sync replicas than replicas."""
        self.security()
        if self.min_insync_replicas > self.replication_factor:
            raise ConfigError(f"TRENDS_KAFKA__MIN_INSYNC_REPLICAS={self.min_insync_replicas} is more than "
                              f"TRENDS_KAFKA__REPLICATION_FACTOR={self.replication_factor}: no write could succeed")
        return self

    def security(self) -> ClientSecurity:
        """The checked client security, password included (translate it with trendcore.kafka_config)."""
        password = self.sasl_password.get_secret_value() if self.sasl_password is not None else None
        return kafka_config.parse(self.client, password)

    @property
    def topic_configs(self) -> dict[str, str]:
        """Configs of each topic created."""
        return {"min.insync.replicas": str(self.min_insync_replicas), "retention.ms": str(self.retention_ms)}

    @property
    def topics(self) -> list[str]:
        return [self.posts_topic, self.engagements_topic, self.dead_letter_topic]

    @property
    def host_port(self) -> tuple[str, int]:
        """The first bootstrap server as (host, port)."""
        host, _, port = self.bootstrap.split(",")[0].rpartition(":")
        return host, int(port)


class RedisSettings(BaseModel):
    url: str = Field("redis://127.0.0.1:16379/0", description="Redis URL: redis://host:port/db, or rediss:// for "
                     "TLS; it may carry user:password@ (else `username`/`password` below are used).")
    username: str | None = Field(None, description="ACL user, when the URL names none (unset: the default user).")
    password: SecretStr | None = Field(None, description="Password of the user, when the URL has none (a secret: "
                                       "never logged; passed on to the processes the stack starts).")
    ca_file: Path | None = Field(None, description="PEM file of the CA that signed the server's certificate, for "
                                 "rediss:// URLs (unset: the system's CAs). A path on every machine that connects: "
                                 "the Spark executors publish too.")
    key_prefix: str = Field("", pattern=r"^[A-Za-z0-9_.:/-]*$", description="Put before every key the project "
                            "reads or writes, e.g. `trends:`: several deployments can share one Redis, and an ACL "
                            "key pattern such as `~trends:*` covers every key. Letters, digits and _ . : / - only.")
    retries: int = Field(5, ge=0, description="Retries with exponential backoff on connection errors.")
    mode: str = Field(
        "single", pattern=r"^(single|cluster|sentinel)$",
        description="How Redis is deployed: `single` (one server at the URL), `cluster` (Redis Cluster: the URL's "
        "host:port is one node to discover the others from; database 0 only) or `sentinel` (the clients ask "
        "`sentinels` where the master `master_name` is and follow it through failovers; the URL then gives only "
        "the scheme, user, password and database, not the address). TLS, credentials and the CA file apply to "
        "every node. Every layer runs on all three.")
    sentinels: str = Field("", description="Sentinel mode: the Sentinels as comma-separated host:port, e.g. "
                           "`10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379`.")
    master_name: str = Field("", description="Sentinel mode: the name the Sentinels monitor the master under "
                             "(`sentinel monitor <name> ...`).")
    sentinel_password: SecretStr | None = Field(
        None, description="Sentinel mode: password of the Sentinels themselves (their `requirepass`), when they "
        "have one; they are reached over TLS when the URL is rediss://.")

    @model_validator(mode="after")
    def _tls_options_need_tls(self) -> RedisSettings:
        """A CA file with a plain redis:// URL would be silently unused: refuse it."""
        if self.ca_file is not None and not self.url.startswith("rediss://"):
            raise ConfigError("TRENDS_REDIS__CA_FILE is set but TRENDS_REDIS__URL is not a rediss:// (TLS) URL")
        return self

    @model_validator(mode="after")
    def _consistent_mode(self) -> RedisSettings:
        """Refuse settings the mode would ignore or that cannot work: sentinel without its Sentinels or master
        name, Sentinel settings in another mode, a database other than 0 on a cluster."""
        sentinel_only = {"sentinels": self.sentinels, "master_name": self.master_name,
                         "sentinel_password": self.sentinel_password}
        if self.mode != "sentinel":
            stray = [f"TRENDS_REDIS__{name.upper()}" for name, value in sentinel_only.items() if value]
            if stray:
                raise ConfigError(f"{', '.join(stray)} set but TRENDS_REDIS__MODE={self.mode}: Sentinel settings "
                                  "apply only with TRENDS_REDIS__MODE=sentinel")
        if self.mode == "sentinel":
            if not self.sentinels.strip() or not self.master_name.strip():
                raise ConfigError("TRENDS_REDIS__MODE=sentinel needs TRENDS_REDIS__SENTINELS (host:port,...) and "
                                  "TRENDS_REDIS__MASTER_NAME (the name the Sentinels monitor)")
            self.sentinel_addresses()
        if self.mode == "cluster" and self.database() != 0:
            raise ConfigError(f"TRENDS_REDIS__URL names database {self.database()}, but Redis Cluster has only "
                              "database 0: end the URL with /0 (or nothing) in TRENDS_REDIS__MODE=cluster")
        return self

    def database(self) -> int:
        """The database number of the URL (its /N path or ?db=N; 0 when absent)."""
        parsed = urlparse(self.url)
        db = parse_qs(parsed.query).get("db", [parsed.path.strip("/") or "0"])[0]
        if not db.isdigit():
            raise ConfigError(f"TRENDS_REDIS__URL: database {db!r} is not a number")
        return int(db)

    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """`sentinels` as (host, port) pairs; ConfigError for an entry that is not host:port."""
        found = []
        for entry in filter(None, (part.strip() for part in self.sentinels.split(","))):
            host, _, port = entry.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"TRENDS_REDIS__SENTINELS: {entry!r} is not host:port")
            found.append((host.strip("[]"), int(port)))
        return found


class SparkSettings(BaseModel):
    master: str = Field("local[2]", description="Spark master URL: local[*] or spark://host:7077.")
    lake: Annotated[LakeRoot, PlainValidator(validate_lake)] = under_home(
        "lake", "Root of the Delta tables: a path (relative: to the working directory), `file:///path`, or a URI "
        "such as `s3a://bucket/prefix` (any Hadoop file system; S3A's endpoint and keys go in `spark.conf` as "
        "`spark.hadoop.fs.s3a.*`). One writer per table at a time on S3 (docs/batch.md).")
    driver_memory: str = Field("2g", description="Spark driver memory (local mode: all of Spark).")
    shuffle_partitions: int = Field(
        4, ge=1, description="spark.sql.shuffle.partitions, and the partitions the exact counts are computed in "
        "(each held by one Python worker: about 40 bytes a mention); small for 2 cores.")
    class_archive: bool = Field(
        True, description="Start the driver JVM from the class archive `trends batch class-archive` wrote for "
        "this JDK and these jars, when there is one (about 10 s less per job start; docs/batch.md).")
    driver_host: str = Field(
        "127.0.0.1", description="spark.driver.host: the address executors reach the driver at. On a cluster: "
        "this machine's name or IP as the workers see it.")
    driver_bind_address: str = Field(
        "127.0.0.1", description="spark.driver.bindAddress: where the driver listens (0.0.0.0: every interface). "
        "Also SPARK_LOCAL_IP of our Spark processes unless that is set or this is a wildcard.")
    python: str | None = Field(
        None, description="spark.pyspark.python: the Python the executors run, as a path on the workers (e.g. "
        "./env/bin/python of a packed environment in spark.archives). Unset: local[*] runs this interpreter; a "
        "cluster the PYSPARK_PYTHON of the process that starts the driver, else python3 on the workers.")
    conf: dict[str, str] = Field(
        {}, description="Any other Spark configuration, as a JSON object (e.g. "
        '{"spark.executor.memory": "4g", "spark.hadoop.fs.s3a.endpoint": "..."}): set on every session and passed '
        "by spark-submit as --conf; it wins over the project's own values, except spark.jars and "
        "spark.driver.extraJavaOptions, which are added to the project's.")

    @field_validator("conf", mode="before")
    @classmethod
    def _conf_values_as_text(cls, conf: Any) -> Any:
        """Spark reads every value as text: JSON numbers and booleans (2, true) become "2", "true"."""
        if not isinstance(conf, dict):
            return conf
        return {k: json.dumps(v) if isinstance(v, (bool, int, float)) else v for k, v in conf.items()}


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


REMOVED = {
    f"{ENV_PREFIX}SPEED{NESTED}STATE": "removed: the speed layer keeps partition state, its only mode since the Lua "
                                       "path was removed (docs/decisions.md)",
    f"{ENV_PREFIX}SPEED{NESTED}RECENT_POST_IDS": "removed with the Lua path: each partition remembers "
                                                 "TRENDS_SPEED__SEEN_POST_IDS post ids",
}
"""Settings that existed once, with what to do instead: named in the refusal rather than guessed at."""


def refuse_unknown(names: Iterable[str], known: set[str] | None = None) -> None:
    """Raise ConfigError when a TRENDS_ name (any case, as pydantic-settings reads them) names no setting."""
    known = env_names() if known is None else known
    unknown = sorted({n.upper() for n in names if n.upper().startswith(ENV_PREFIX)} - known)
    if unknown:
        hints = []
        for name in unknown:
            nearest = _nearest(name, known)
            if name in REMOVED:
                hints.append(f"{name} ({REMOVED[name]})")
            else:
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
            elif isinstance(value, SecretStr):
                env[key] = value.get_secret_value()  # the child needs the secret itself, not its mask
            elif isinstance(value, bool):
                env[key] = str(value).lower()
            elif isinstance(value, (dict, list)):
                env[key] = json.dumps(value)
            elif value is not None:
                env[key] = str(value)

    walk(settings, ENV_PREFIX)
    return env

"""Redis client built from settings, with redis-py's own Retry and exponential backoff.

TLS comes with a rediss:// URL (and `redis.ca_file` for a private CA); credentials from the URL, else
`redis.username` / `redis.password`. `redis.mode` picks the topology: one server, a Redis Cluster
(RedisCluster, made on first use) or a master found through Sentinel (followed through failovers).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.exceptions import MaxConnectionsError, RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from trendcore.errors import EvictingRedis, ServiceError
from trendcore.settings import RedisSettings

log = logging.getLogger(__name__)

_HINTS = {
    "CERTIFICATE_VERIFY_FAILED": "the server's certificate is not signed by the CA of TRENDS_REDIS__CA_FILE (the "
                                 "system's CAs when unset), or does not name the host of TRENDS_REDIS__URL",
    "WRONG_VERSION_NUMBER": "that port does not speak TLS: use a redis:// URL, or the server's TLS port",
    "Connection closed by server": "if that port serves TLS, use a rediss:// URL",
    "Connection reset by peer": "if that port serves TLS, use a rediss:// URL",
    "Timeout connecting": "nothing answered in time: check the host and port; a rediss:// URL to a port that "
                          "does not speak TLS waits like this too",
    "permissions": "the ACL user may use only keys of its pattern: does TRENDS_REDIS__KEY_PREFIX match it?",
    "cluster support disabled": "that server is not a Redis Cluster node: TRENDS_REDIS__MODE=single",
    "MOVED": "that server is a Redis Cluster node: TRENDS_REDIS__MODE=cluster",
    "Redis Cluster cannot be connected": "TRENDS_REDIS__URL must name a reachable node of the cluster",
    "No master found": "check TRENDS_REDIS__SENTINELS and TRENDS_REDIS__MASTER_NAME",
}
"""Words of a redis-py error (any case) -> what to check, for failures whose own message does not say it."""


def _hint(exc: Exception) -> str:
    """What to check for a TLS, scheme or ACL mistake ('' for anything else)."""
    text = str(exc).lower()
    return next((f" ({hint})" for words, hint in _HINTS.items() if words.lower() in text), "")


POOL_FULL = "did not answer in time (every connection of this process's pool still waits on an earlier command)"
"""Why a command got no connection: redis-py caps a pool (100 by default) and raises MaxConnectionsError at once;
only threads a read budget abandoned while Redis stalls hold that many."""


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Re-raise redis-py errors as ServiceError, saying what we were doing (and what to check for TLS).

    The cluster client's own errors (RedisClusterException: no reachable node, keys of several slots) are no
    RedisError in redis-py: wrapped too."""
    try:
        yield
    except MaxConnectionsError as exc:  # the pool is full of commands still waiting: Redis is slow, not gone
        raise ServiceError(f"Redis: {action}: {POOL_FULL}") from exc
    except (redis.RedisError, RedisClusterException) as exc:
        raise ServiceError(f"Redis: {action} failed: {exc}{_hint(exc)}") from exc


_BUDGET = threading.local()
"""The monotonic deadline of the Redis work the current thread does (`deadline`), read by `BudgetRetry`."""


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Within this block, this thread's Redis commands retry only until `at` (time.monotonic()): a stalled server
    then costs one socket timeout, not every retry and its backoff."""
    before, _BUDGET.at = getattr(_BUDGET, "at", None), at
    try:
        yield
    finally:
        _BUDGET.at = before


def _left_s() -> float | None:
    """Seconds left before this thread's deadline (None: no deadline set)."""
    at = getattr(_BUDGET, "at", None)
    return None if at is None else at - time.monotonic()


class BudgetRetry(Retry):
    """redis-py's Retry that also stops retrying when the thread's `deadline` has passed, or would pass during the
    backoff: the last error is raised then, as when the retries are used up."""

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):
        self._backoff.reset()
        failures = 0
        while True:
            try:
                return do()
            except self._supported_errors as error:
                if is_retryable and not is_retryable(error):
                    raise
                failures += 1
                if with_failure_count:
                    fail(error, failures)
                else:
                    fail(error)
                backoff, left = self._backoff.compute(failures), _left_s()
                if (self._retries >= 0 and failures > self._retries) or (left is not None and left <= backoff):
                    raise error
                if backoff > 0:
                    time.sleep(backoff)


def connection_options(settings: RedisSettings) -> dict[str, Any]:
    """Credentials and TLS options the URL does not carry (the URL's own user and password win)."""
    options: dict[str, Any] = {}
    if settings.username:
        options["username"] = settings.username
    if settings.password is not None:
        options["password"] = settings.password.get_secret_value()
    if settings.ca_file is not None and settings.url.startswith("rediss://"):
        options["ssl_ca_certs"] = str(settings.ca_file)
    return options


def client(settings: RedisSettings, **overrides) -> redis.Redis:
    """A client of `settings.mode` that retries connection errors and timeouts with exponential backoff (no longer
    than the thread's `deadline`, when one is set)."""
    options = dict(
        retry=BudgetRetry(ExponentialBackoff(cap=2.0, base=0.05), settings.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        **connection_options(settings),
    )
    options.update(overrides)
    if settings.mode == "cluster":
        return LazyCluster(lambda: RedisCluster.from_url(settings.url, **options))  # type: ignore[return-value]
    if settings.mode == "sentinel":
        return _master(settings, options)
    return redis.Redis.from_url(settings.url, **options)


def _master(settings: RedisSettings, options: dict[str, Any]) -> redis.Redis:
    """The master the Sentinels name: each new connection asks them where it is, so after a failover the
    retried command reaches the promoted replica. The URL gives TLS, credentials and database, not the address."""
    url = parse_url(settings.url)
    tls = {"ssl": True} if url.pop("connection_class", None) is not None else {}
    node = {k: v for k, v in url.items() if k not in ("host", "port")}
    own = {k: v for k, v in options.items() if k.startswith("socket_") or k == "ssl_ca_certs"} | tls
    if settings.sentinel_password is not None:
        own["password"] = settings.sentinel_password.get_secret_value()
    sentinel = Sentinel(settings.sentinel_addresses(), sentinel_kwargs=own, **(options | node | tls))
    return sentinel.master_for(settings.master_name)


def is_cluster(client: Any) -> bool:
    """True for a Redis Cluster client, which splits multi-key reads per hash slot."""
    return isinstance(client, (RedisCluster, LazyCluster))


def mget(client: redis.Redis, names: list[str]) -> list[bytes | None]:
    """MGET that works on a cluster too: there one MGET per hash slot (not atomic across slots)."""
    return client.mget_nonatomic(names) if is_cluster(client) else client.mget(names)  # type: ignore[attr-defined]


def pipe_mget(pipe: Any, names: list[str]) -> None:
    """Queue MGET in a pipeline of either client. redis-py's cluster pipeline refuses its `mget` method; the
    command itself is sent, and works when the keys share a slot (a tag's hours do: its hash tag)."""
    pipe.execute_command("MGET", *names)


def rename(pipe: Any, source: str, target: str) -> None:
    """Queue RENAME in a pipeline of either client. redis-py's cluster pipeline refuses its `rename` method
    whatever the keys; the command itself is sent, and works when both keys are in one slot (staging names are)."""
    pipe.execute_command("RENAME", source, target)


class LazyCluster:
    """A RedisCluster made on first use. RedisCluster asks a node for the slot map when built; made lazily,
    a service starts while the cluster is down (as with redis.Redis) and the first command's failure goes
    through `redis_errors` like any other."""

    def __init__(self, make: Callable[[], RedisCluster]) -> None:
        self._make, self._client, self._lock = make, None, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster(), name)

    def cluster(self) -> RedisCluster:
        """The RedisCluster, built (connected) the first time."""
        with self._lock:
            if self._client is None:
                self._client = self._make()
            return self._client

    def close(self) -> None:
        """Close the cluster's connections, if it was ever built."""
        if self._client is not None:
            self._client.close()


def eviction_policies(client: Any) -> set[str]:
    """The `maxmemory-policy` of the server (of every master on a cluster), from INFO memory; empty when
    the ACL user may not run INFO (a warning says the policy went unchecked)."""
    with redis_errors("reading the eviction policy (INFO memory)"):
        try:
            info = client.info("memory", target_nodes=RedisCluster.PRIMARIES) if is_cluster(client) \
                else client.info("memory")
        except redis.exceptions.NoPermissionError as exc:
            log.warning("maxmemory-policy not checked: the ACL user may not run INFO (%s)", exc)
            return set()
    found = info.values() if is_cluster(client) else [info]
    return {str(node.get("maxmemory_policy", "unknown")) for node in found}


def require_noeviction(client: Any, who: str) -> None:
    """Refuse to run on a Redis that may evict keys: every key we write has a TTL, so any policy but
    `noeviction` can drop sketches, post lists or partition offsets silently (undercounts, double counts)."""
    evicting = sorted(eviction_policies(client) - {"noeviction"})
    if evicting:
        raise EvictingRedis(
            f"Redis: {who} refuses maxmemory-policy {', '.join(evicting)}: Redis would evict sketches and "
            "offsets without a word (undercounts, double counts); set `maxmemory-policy noeviction` "
            "(CONFIG SET maxmemory-policy noeviction, and in redis.conf)")

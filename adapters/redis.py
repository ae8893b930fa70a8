"""Redis client built from settings, with redis-py's own Retry and exponential backoff.

TLS comes with a rediss:// URL (and `redis.ca_file` for a private CA); credentials from the URL, else
`redis.username` / `redis.password`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from trendcore.errors import ServiceError
from trendcore.settings import RedisSettings

_HINTS = {
    "CERTIFICATE_VERIFY_FAILED": "the server's certificate is not signed by the CA of TRENDS_REDIS__CA_FILE (the "
                                 "system's CAs when unset), or does not name the host of TRENDS_REDIS__URL",
    "WRONG_VERSION_NUMBER": "that port does not speak TLS: use a redis:// URL, or the server's TLS port",
    "Connection closed by server": "if that port serves TLS, use a rediss:// URL",
    "Connection reset by peer": "if that port serves TLS, use a rediss:// URL",
    "Timeout connecting": "nothing answered in time: check the host and port; a rediss:// URL to a port that "
                          "does not speak TLS waits like this too",
    "permissions": "the ACL user may use only keys of its pattern: does TRENDS_REDIS__KEY_PREFIX match it?",
}
"""Words of a redis-py error (any case) -> what to check, for failures whose own message does not say it."""


def _hint(exc: redis.RedisError) -> str:
    """What to check for a TLS, scheme or ACL mistake ('' for anything else)."""
    text = str(exc).lower()
    return next((f" ({hint})" for words, hint in _HINTS.items() if words.lower() in text), "")


@contextmanager
def redis_errors(action: str) -> Iterator[None]:
    """Re-raise redis-py errors as ServiceError, saying what we were doing (and what to check for TLS)."""
    try:
        yield
    except redis.RedisError as exc:
        raise ServiceError(f"Redis: {action} failed: {exc}{_hint(exc)}") from exc


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
    """A client that retries connection errors and timeouts with exponential backoff."""
    options = dict(
        retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), settings.retries),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_timeout=10,
        socket_connect_timeout=5,
        health_check_interval=30,
        **connection_options(settings),
    )
    options.update(overrides)
    return redis.Redis.from_url(settings.url, **options)

"""Where the Delta lake lives: a local folder or a URI on another file system (an object store), and the
arithmetic on it every reader and writer shares (join a table name, is it local, options for delta-rs).

A lake root is either a `Path` (a plain path, or a `file://` URI, which becomes the plain path) or a
`LakeUri` (`s3a://bucket/prefix`, any `scheme://authority/path` a Hadoop file system serves). Both support
`root / "name"`, so code and tests that build a sub-lake do not care which it is. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["LakeRoot", "LakeUri", "delta_rs_storage_options", "is_local", "join", "parse_lake", "resolve"]

_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]+):")
"""A URI scheme (two characters at least, so a Windows drive letter is never taken for one)."""

LOCAL_SCHEMES = frozenset({"file"})
S3_SCHEMES = frozenset({"s3", "s3a"})


class LakeUri(str):
    """A lake root on a non-local file system, normalised to `scheme://authority/path` without a trailing
    slash (the scheme in lower case). Build it with `parse_lake`, which checks the shape."""

    __slots__ = ()

    def __truediv__(self, name: str | Path) -> LakeUri:
        """The sub-location `name` (a table, or a lake of its own under this one)."""
        return LakeUri(join(self, str(name)))

    @property
    def scheme(self) -> str:
        return urlsplit(self).scheme

    @property
    def bucket(self) -> str:
        """The authority: the bucket of an object store (s3a://bucket/...), the name node of hdfs://."""
        return urlsplit(self).netloc

    @property
    def key(self) -> str:
        """The path inside the bucket, without the leading slash ("" at the bucket's root)."""
        return urlsplit(self).path.lstrip("/")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _validate_uri, serialization=core_schema.plain_serializer_function_ser_schema(str))


LakeRoot = Path | LakeUri
"""What `settings.spark.lake` holds: a local folder or a URI."""


def parse_lake(value: str | Path) -> LakeRoot:
    """A lake setting as a root: a plain path or `file://` URI as a Path (relative stays relative), any
    other `scheme://authority/path` as a LakeUri. Raises ValueError for a URI that lost its `//`
    (`s3a:/bucket`: what a Path makes of `s3a://bucket`), lacks a bucket, or carries a query or fragment."""
    if isinstance(value, Path):
        return value
    text = value.strip()
    match = _SCHEME.match(text)
    if not match:
        return Path(text)
    scheme = match["scheme"].lower()
    if scheme in LOCAL_SCHEMES:
        return _file_path(text)
    return _remote(text, scheme)


def _file_path(text: str) -> Path:
    """`file:///abs/path` (or Hadoop's `file:/abs/path`) as the Path it names."""
    parts = urlsplit(text)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"{text}: a file:// lake must be on this machine (file:///path), not on {parts.netloc}")
    if not parts.path.startswith("/"):
        raise ValueError(f"{text}: a file:// lake needs an absolute path (file:///path)")
    return Path(unquote(parts.path))


def _remote(text: str, scheme: str) -> LakeUri:
    """`scheme://authority/path`, checked and normalised."""
    rest = text[len(scheme) + 1:]
    if not rest.startswith("//"):
        raise ValueError(f"{text}: a lake URI is {scheme}://bucket/prefix (two slashes after `{scheme}:`)")
    parts = urlsplit(text)
    if not parts.netloc:
        raise ValueError(f"{text}: a lake URI names its bucket: {scheme}://bucket/prefix")
    if parts.query or parts.fragment:
        raise ValueError(f"{text}: a lake URI takes no query or fragment")
    path = re.sub(r"/{2,}", "/", parts.path).rstrip("/")
    return LakeUri(f"{scheme}://{parts.netloc}{path}")


def _validate_uri(value: Any) -> LakeUri:
    root = parse_lake(value) if isinstance(value, str) else value
    if not isinstance(root, LakeUri):
        raise ValueError(f"{value!r} is not a lake URI (scheme://bucket/prefix)")
    return root


def validate_lake(value: Any) -> LakeRoot:
    """Pydantic's view of a lake setting: a Path, a LakeUri, or a string `parse_lake` understands."""
    if isinstance(value, (Path, LakeUri)):
        return value
    if isinstance(value, str):
        return parse_lake(value)
    raise ValueError(f"a lake is a path or a URI string, not {type(value).__name__}")


def resolve(value: str, home: Path, configured: LakeRoot) -> str:
    """A lake named by a person (a notebook parameter, a command-line option) as a root string: empty, the
    `configured` one; a relative path, under `home` (TRENDS_HOME); an absolute path or a URI, as given."""
    if not value.strip():
        return join(configured)
    root = parse_lake(value)
    if isinstance(root, Path) and not root.is_absolute():
        root = home / root
    return join(root)


def join(root: str | Path, *names: str) -> str:
    """`root/name/...` as a string Spark and delta-rs take: a URI keeps its `//`, a path is not resolved."""
    base = str(root)
    base = base if base == "/" else base.rstrip("/")
    tail = "/".join(n.strip("/") for n in names if n.strip("/"))
    if not tail:
        return base
    return f"{base}{tail}" if base.endswith("/") else f"{base}/{tail}"


def is_local(root: str | Path) -> bool:
    """True for a lake on this machine's file system (a Path, a plain path string or a file: URI)."""
    if isinstance(root, Path):
        return True
    match = _SCHEME.match(str(root))
    return match is None or match["scheme"].lower() in LOCAL_SCHEMES


_S3A = "spark.hadoop.fs.s3a."


def delta_rs_storage_options(root: str | Path, spark_conf: Mapping[str, str]) -> dict[str, str]:
    """delta-rs (`deltalake`) storage options for reading the lake at `root` with the S3 settings Spark
    has (`spark.hadoop.fs.s3a.*` in the `spark.conf` setting), so a reader without a JVM needs no
    settings of its own. {} for a local lake or another scheme (delta-rs then uses its defaults and the
    AWS_* environment). Only plain keys and an endpoint are translated; for other S3A credential
    providers, set delta-rs's AWS_* variables."""
    if is_local(root) or urlsplit(str(root)).scheme not in S3_SCHEMES:
        return {}
    s3a = {k.removeprefix(_S3A): v for k, v in spark_conf.items() if k.startswith(_S3A)}
    options: dict[str, str] = {}
    ssl = s3a.get("connection.ssl.enabled", "true").strip().lower() != "false"
    if endpoint := s3a.get("endpoint", "").strip():
        if "://" not in endpoint:
            endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
        options["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
    for ours, theirs in (("access.key", "AWS_ACCESS_KEY_ID"), ("secret.key", "AWS_SECRET_ACCESS_KEY"),
                         ("session.token", "AWS_SESSION_TOKEN")):
        if s3a.get(ours):
            options[theirs] = s3a[ours]
    region = s3a.get("endpoint.region") or s3a.get("region")
    options["AWS_REGION"] = region or "us-east-1"  # S3-protocol servers ignore it; object_store wants one
    if s3a.get("path.style.access", "false").strip().lower() == "true":
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    return options

"""A Redis server (Debian's redis-server) on the project's port, with a project-local directory.

With `stack.redis_tls_port` set it also serves TLS on that port, with a CA and a server certificate
made by openssl on first start (redis/tls under the stack home): a local stand-in for a managed Redis
reached over rediss://, so the TLS path is tested against a real server.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from trendcore.errors import StackError
from trendcore.settings import Settings
from trends.stack import procs

CERT_DAYS = 3650
"""Validity of the local certificates: they are made once per stack home."""


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of the local TLS listener: the CA clients trust, the server's certificate and key."""

    ca: Path
    cert: Path
    key: Path


def service(settings: Settings) -> procs.Service:
    url = urlparse(settings.redis.url)
    return procs.Service("redis", settings.stack.home / "run", url.hostname or "127.0.0.1", url.port or 6379)


def tls_files(settings: Settings) -> TlsFiles:
    """Where the local stack keeps its TLS files (made by `make_certificates`)."""
    folder = settings.stack.home / "redis" / "tls"
    return TlsFiles(folder / "ca.crt", folder / "server.crt", folder / "server.key")


def _openssl(*args: str) -> None:
    """Run openssl; StackError with its own words when it fails."""
    binary = shutil.which("openssl")
    if binary is None:
        raise StackError("openssl is not installed: it makes the local Redis TLS certificates (apt-get install "
                         "openssl)")
    done = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_certificates(folder: Path, host: str, name: str = "trends local Redis CA") -> TlsFiles:
    """A new CA (EC P-256) and a server certificate it signs for `host`, 127.0.0.1 and localhost, in `folder`.

    The extensions are the ones strict verifiers (Python 3.13's VERIFY_X509_STRICT) require.
    """
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder / "ca.crt", folder / "server.crt", folder / "server.key")
    ca_key, csr, ext = folder / "ca.key", folder / "server.csr", folder / "server.ext"
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *curve, "-days", str(CERT_DAYS), "-subj", f"/CN={name}", "-keyout", str(ca_key),
             "-out", str(files.ca), "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", "-new", *curve, "-subj", f"/CN={host}", "-keyout", str(files.key), "-out", str(csr))
    names = {"IP:127.0.0.1", "DNS:localhost", f"{'IP' if host.replace('.', '').isdigit() else 'DNS'}:{host}"}
    ext.write_text(f"subjectAltName={','.join(sorted(names))}\nbasicConstraints=critical,CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(files.ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-days", str(CERT_DAYS), "-extfile", str(ext), "-out", str(files.cert))
    files.key.chmod(0o600)
    ca_key.chmod(0o600)
    return files


def _listeners(settings: Settings, svc: procs.Service) -> list[str]:
    """redis-server arguments of its ports: the URL's plain port, and the TLS one when `stack.redis_tls_port`
    is set; a rediss:// URL means TLS only, on the URL's port (which must then be that TLS port)."""
    port = settings.stack.redis_tls_port
    if urlparse(settings.redis.url).scheme != "rediss":
        if port == svc.port:
            raise StackError(f"TRENDS_STACK__REDIS_TLS_PORT={port} is the plain port of TRENDS_REDIS__URL: choose "
                             "another, or make the URL rediss:// for TLS only")
        return ["--port", str(svc.port), *_tls_args(settings, svc.host)]
    if port != svc.port:
        raise StackError(f"TRENDS_REDIS__URL is a rediss:// URL to port {svc.port}, so the local Redis must serve "
                         f"TLS there: set TRENDS_STACK__REDIS_TLS_PORT={svc.port}")
    return ["--port", "0", *_tls_args(settings, svc.host)]


def _tls_args(settings: Settings, host: str) -> list[str]:
    """redis-server arguments of the TLS listener (none when `stack.redis_tls_port` is unset)."""
    port = settings.stack.redis_tls_port
    if port is None:
        return []
    files = tls_files(settings)
    if not all(p.exists() for p in (files.ca, files.cert, files.key)):
        files = make_certificates(files.ca.parent, host)
    return ["--tls-port", str(port), "--tls-cert-file", str(files.cert), "--tls-key-file", str(files.key),
            "--tls-ca-cert-file", str(files.ca), "--tls-auth-clients", "no"]


def start(settings: Settings) -> int:
    """Start redis-server without persistence (the speed layer rebuilds from Kafka after a loss)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise StackError("redis-server is not installed: run scripts/bootstrap.sh (it installs Debian's redis-server)")
    svc = service(settings)
    data = settings.stack.home / "redis"
    data.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--bind", svc.host,
        *_listeners(settings, svc),
        "--dir", str(data),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--protected-mode", "no",
        "--maxmemory", settings.stack.redis_maxmemory,
        "--maxmemory-policy", "noeviction",
    ]
    pid = procs.start(svc, argv)
    procs.wait_ready(svc, settings.stack.start_timeout_s)
    return pid

"""s3proxy on loopback with its filesystem backend: a real S3-protocol server for the lake tests.

s3proxy (org.gaul:s3proxy, resolved from Maven Central by scripts/bootstrap.sh into <jars>/s3proxy) speaks the
S3 REST API (SigV4 auth, path-style buckets, multipart upload, copy, list v2) over jclouds; with the
`filesystem-nio2` backend each bucket is a folder and each object a file under `basedir`, so a test can look
at what was written. It is one Java process (Java 17 is already needed by Spark), starts in about a second
and needs no Docker. Fixed test keys: it only listens on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from trendcore.errors import StackError

ACCESS_KEY = "trends-test"
SECRET_KEY = "trends-test-secret"


@dataclass
class S3Server:
    """A running s3proxy: its endpoint, the test keys, and the folder its buckets live in."""

    endpoint: str
    basedir: Path
    process: subprocess.Popen
    log: Path

    def bucket(self, name: str) -> str:
        """Create bucket `name` (a folder of the filesystem backend) and return its s3a:// root."""
        (self.basedir / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def hadoop_conf(self) -> dict[str, str]:
        """The S3A options (Hadoop names, `fs.s3a.*`) that reach this server."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            # small parts, so that a test file of a few MB already goes up as a multipart upload
            "fs.s3a.multipart.size": "5M",
            "fs.s3a.multipart.threshold": "5M",
        }

    def spark_conf(self) -> dict[str, str]:
        """The same as Spark settings (`spark.hadoop.fs.s3a.*`), as TRENDS_SPARK__CONF carries them."""
        return {f"spark.hadoop.{key}": value for key, value in self.hadoop_conf().items()}


def s3proxy_jar(jars: Path) -> Path:
    """The s3proxy jar scripts/bootstrap.sh resolved; StackError when it did not."""
    found = sorted((jars / "s3proxy").glob("s3proxy-*-jar-with-dependencies.jar"))
    if not found:
        raise StackError(f"no s3proxy jar in {jars / 's3proxy'}: run scripts/bootstrap.sh")
    return found[-1]


def start(jars: Path, home: Path, port: int, timeout_s: float = 60.0) -> S3Server:
    """Start s3proxy on 127.0.0.1:`port` with an empty store under `home`; wait until it accepts connections."""
    if _listening(port):
        raise StackError(f"port {port} is already taken: cannot start s3proxy there")
    home.mkdir(parents=True, exist_ok=True)
    basedir = home / "s3-data"
    shutil.rmtree(basedir, ignore_errors=True)
    basedir.mkdir()
    endpoint = f"http://127.0.0.1:{port}"
    properties = home / "s3proxy.conf"
    properties.write_text("\n".join([
        f"s3proxy.endpoint={endpoint}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={ACCESS_KEY}",
        f"s3proxy.credential={SECRET_KEY}",
        "jclouds.provider=filesystem-nio2",
        f"jclouds.filesystem.basedir={basedir}",
    ]) + "\n")
    log = home / "s3proxy.log"
    with log.open("wb") as out:
        command = ["java", "-Xmx256m", "-jar", str(s3proxy_jar(jars)), "--properties", str(properties)]
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(endpoint, basedir, process, log)
    deadline = time.monotonic() + timeout_s
    while not _listening(port):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(server)
            raise StackError(f"s3proxy did not start on {endpoint}; its log: {log}")
        time.sleep(0.2)
    return server


def stop(server: S3Server, timeout_s: float = 20.0) -> None:
    """Stop the server (TERM, then KILL) and wait for it."""
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=timeout_s)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0

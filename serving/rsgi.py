"""The API on granian's RSGI interface: a GET /trending cache hit is one call into the server (no ASGI scope
dict, no response messages); every other request goes through the FastAPI app over a small RSGI-to-ASGI
bridge. The stack serves this (`granian --interface rsgi --factory serving.rsgi:app_from_env`); tests and
other ASGI servers use `serving.app` directly. Why: docs/decisions.md ("RSGI for the hot path")."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from serving.app import create_app
from serving.fastpath import HEADERS, TrendingHits
from trendcore.settings import Settings

_ASGI = {"version": "3.0", "spec_version": "2.3"}


class RSGIApp:
    """granian calls `__rsgi__` per request and the init/del hooks once per worker (the app's lifespan)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.hits: TrendingHits = app.state.trending_hits
        self._lifespan = None

    async def __rsgi__(self, scope, proto) -> None:
        if scope.proto != "http":
            return  # the stack runs without websockets
        if scope.path == "/trending" and scope.method == "GET":
            body = await self.hits.serve(_latin1(scope.query_string))
            if body is not None:
                proto.response_bytes(200, HEADERS, body)
                return
        await call_asgi(self.app, scope, proto)

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Enter the app's lifespan (what an ASGI server does at startup)."""
        self._lifespan = self.app.router.lifespan_context(self.app)
        loop.run_until_complete(self._lifespan.__aenter__())

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        """Leave the app's lifespan: the services close their connections."""
        if self._lifespan is not None:
            loop.run_until_complete(self._lifespan.__aexit__(None, None, None))
            self._lifespan = None


async def call_asgi(app, scope, proto) -> None:
    """Run one HTTP request through an ASGI app over an RSGI protocol object."""
    exchange = _Exchange(proto)
    await app(asgi_scope(scope), exchange.receive, exchange.send)
    exchange.finish()


class _Exchange:
    """The ASGI receive/send pair of one request: the body streams in; the response goes out as one buffer,
    or as a stream when the app sends it in parts (files, streaming responses)."""

    __slots__ = ("proto", "body", "body_done", "status", "headers", "started", "answered", "stream")

    def __init__(self, proto) -> None:
        self.proto = proto
        self.body = proto.__aiter__()
        self.body_done = self.started = self.answered = False
        self.status, self.headers, self.stream = 500, [], None

    async def receive(self) -> dict:
        if self.body_done:
            await self.proto.client_disconnect()
            return {"type": "http.disconnect"}
        try:
            return {"type": "http.request", "body": await self.body.__anext__(), "more_body": True}
        except StopAsyncIteration:
            self.body_done = True
            return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status, self.started = message["status"], True
            self.headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ())]
            return
        chunk, more = message.get("body", b""), message.get("more_body", False)
        if self.stream is None and not more:
            self.proto.response_bytes(self.status, self.headers, chunk)
            self.answered = True
            return
        if self.stream is None:
            self.stream = self.proto.response_stream(self.status, self.headers)
            self.answered = True
        if chunk:
            await self.stream.send_bytes(chunk)

    def finish(self) -> None:
        """A response started but given no body (HEAD, 204) still goes out."""
        if self.started and not self.answered:
            self.proto.response_empty(self.status, self.headers)


def asgi_scope(scope) -> dict:
    """The ASGI HTTP scope of an RSGI one (granian gives the path percent-decoded, the query string raw)."""
    return {
        "type": "http", "asgi": _ASGI, "http_version": scope.http_version, "method": scope.method,
        "scheme": scope.scheme, "path": scope.path, "query_string": _latin1(scope.query_string), "root_path": "",
        "headers": [(_latin1(k), _latin1(v)) for k, v in scope.headers.items()],
        "client": _address(scope.client), "server": _address(scope.server),
    }


def _address(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (host, int(port)) if port.isdigit() else None


def _latin1(text: str) -> bytes:
    """Header and query bytes as the client sent them (UTF-8 when a value is outside Latin-1)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode()


def app_from_env() -> RSGIApp:
    """RSGI factory entry point: settings from TRENDS_*, like `serving.app.app_from_env`."""
    return RSGIApp(create_app(Settings()))

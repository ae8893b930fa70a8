"""Reference for bench/serving_bench.py: the smallest ASGI app (fixed bytes) under the stack's server flags,
i.e. what the HTTP server itself costs per request on this machine, with no FastAPI, cache or metrics."""

BODY = b'{"age_s":0.0,"entries":[]}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send) -> None:
    """Answer every HTTP request with the same small JSON."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})

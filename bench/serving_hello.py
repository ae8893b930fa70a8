"""Reference for bench/serving_bench.py: the smallest RSGI app (fixed bytes) under the stack's server flags,
i.e. what the HTTP server itself costs per request on this machine, with no FastAPI, cache or metrics."""

BODY = b'{"age_s":0.0,"entries":[]}'
HEADERS = [("content-type", "application/json")]


async def app(scope, proto) -> None:
    """Answer every HTTP request with the same small JSON."""
    if scope.proto == "http":
        proto.response_bytes(200, HEADERS, BODY)

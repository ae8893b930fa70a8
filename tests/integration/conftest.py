"""Fixtures the serving tests share."""

from __future__ import annotations

import pytest

from adapters import redis as redis_io
from tests.integration.layout import LayoutWriter


@pytest.fixture(scope="module")
def writer(stack):
    """Writes keys exactly as the layers do (tests/integration/layout.py), on the session's Redis."""
    client = redis_io.client(stack.redis)
    yield LayoutWriter(client, stack.sketch.shape)
    client.close()

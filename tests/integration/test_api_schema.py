"""Property-based fuzzing of the published OpenAPI spec (schemathesis) against the real app: no 5xx, and
every answer matches its documented status codes, content types and schemas. Schema-valid requests may
still be refused with 422 (unknown region XX, `to` before `from`, a tag with no letter): the spec cannot say
that, so schemathesis' positive_data_acceptance check is the one left out."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from adapters import redis as redis_io
from serving.app import create_app
from tests.integration.layout import LayoutWriter

pytestmark = pytest.mark.integration
TOKEN = "fuzz-token"
EXAMPLES = 25


@pytest.fixture(scope="module")
def api_schema(stack):
    api = stack.api.model_copy(update={"token": TOKEN, "write_burst": 100_000, "wait_timeout_s": 0.2,
                                       "readiness_probe": "HM:1h:volume"})
    client = redis_io.client(stack.redis)
    LayoutWriter(client, stack.sketch.shape).snapshot("HM", "1h", "volume", [("fuzzready", 3)])  # so /readyz may be 200
    client.close()
    app = create_app(stack.model_copy(update={"api": api}))
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    app.state.services.close()


def test_every_operation_is_fuzzed_with_no_server_errors(api_schema):
    """One Hypothesis run per operation (schemathesis' pytest plugin does not run under pytest 9 here)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:
        _fuzz(operation)


def _fuzz(operation) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, excluded_checks=[positive_data_acceptance])

    run()

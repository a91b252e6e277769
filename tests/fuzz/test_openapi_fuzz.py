"""schemathesis against the served OpenAPI document: no request may produce a 5xx.

Generated requests go to a real server on 127.0.0.1 with a bounded example budget per
operation. ``/api/v1/watch`` and ``/api/v1/aggregate`` are left out: a valid request opens an
endless stream by design (their validation is the same code as replay's, which is fuzzed,
plus aggregate's own ``group_by`` checks, tested in ``tests/host/streaming``). schemathesis is
used as a library (its pytest plugin is tied to pytest internals that change between releases).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import running_server

CONFIG = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})
BUDGET = settings(
    max_examples=20, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with running_server(CONFIG) as server:
        yield server.url


def test_no_server_errors(server_url: str) -> None:
    document = httpx.get(f"{server_url}/api-docs/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document).exclude(
        path=["/api/v1/watch", "/api/v1/aggregate"]
    )
    fuzzed = 0
    for result in schema.get_all_operations():
        operation = result.ok()

        @BUDGET
        @given(case=operation.as_strategy())
        def no_5xx(case: schemathesis.Case) -> None:
            response = case.call(base_url=server_url, timeout=10)
            assert response.status_code < 500, (
                f"{case.method} {case.formatted_path} -> {response.status_code}: "
                f"{response.text[:300]}"
            )

        no_5xx()
        fuzzed += 1
    assert fuzzed >= 9, "every documented operation but the endless streams was fuzzed"

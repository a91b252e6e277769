"""schemathesis against the served OpenAPI document: no request may produce a 5xx.

Generated requests go to a real server on 127.0.0.1 with a bounded example budget per
operation. ``/api/v1/watch`` is left out: a valid live watch is an endless stream by design
(its request validation is the same code as replay's, which is fuzzed).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.server import running_server

CONFIG = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with running_server(CONFIG) as server:
        yield server.url


@pytest.fixture(scope="module")
def api_schema(server_url: str) -> schemathesis.BaseSchema:
    document = httpx.get(f"{server_url}/api-docs/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    schema.config.base_url = server_url
    return schema.exclude(path="/api/v1/watch")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case, server_url: str) -> None:
    response = case.call(base_url=server_url, timeout=10)
    case.validate_response(response, checks=[not_a_server_error])

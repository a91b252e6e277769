"""schemathesis against the served OpenAPI document: no request may produce a 5xx.

Generated requests go to a real server on 127.0.0.1 with a bounded example budget per
operation. The streaming routes (watch, replay, aggregate) are fuzzed through their own
bounded reader: a valid request opens an endless stream by design, so only the status and
the first bytes (at most :data:`STREAM_READ_BYTES`, for at most :data:`STREAM_READ_SECONDS`)
are read. schemathesis is used as a library (its pytest plugin is tied to pytest internals
that change between releases).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

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
STREAMS = ["/api/v1/watch", "/api/v1/replay", "/api/v1/aggregate"]
STREAM_READ_BYTES = 16_384
STREAM_READ_SECONDS = 1.0


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with running_server(CONFIG) as server:
        yield server.url


@pytest.fixture(scope="module")
def schema(server_url: str) -> Any:
    document = httpx.get(f"{server_url}/api-docs/openapi.json").json()
    return schemathesis.openapi.from_dict(document)


def test_no_server_errors(server_url: str, schema: Any) -> None:
    fuzzed = 0
    for result in schema.exclude(path=STREAMS).get_all_operations():
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
    assert fuzzed >= 8, "every documented operation but the streams was fuzzed"


def _bounded_stream(client: httpx.Client, case: schemathesis.Case, base_url: str) -> str:
    """Status line and the first bytes of the answer: ``"<status> <text>"``."""
    kwargs = case.as_transport_kwargs(base_url=base_url)
    request = client.build_request(
        kwargs["method"],
        kwargs["url"],
        headers=kwargs.get("headers"),
        params=kwargs.get("params"),
        cookies=kwargs.get("cookies"),
        json=kwargs.get("json"),
        content=kwargs.get("data"),
    )
    response = client.send(request, stream=True)
    received = bytearray()
    deadline = time.monotonic() + STREAM_READ_SECONDS
    try:
        for chunk in response.iter_raw():
            received += chunk
            if len(received) >= STREAM_READ_BYTES or time.monotonic() >= deadline:
                break
    except httpx.ReadTimeout:
        pass  # an open stream with nothing more to say yet (a heartbeat comes later)
    finally:
        response.close()
    return f"{response.status_code} {received[:300].decode(errors='replace')}"


def test_no_server_errors_on_the_streams(server_url: str, schema: Any) -> None:
    # A short read timeout bounds a quiet stream; connecting still has the usual budget.
    timeout = httpx.Timeout(10.0, read=STREAM_READ_SECONDS / 2)
    fuzzed = 0
    with httpx.Client(timeout=timeout) as client:
        for result in schema.include(path=STREAMS).get_all_operations():
            operation = result.ok()

            @BUDGET
            @given(case=operation.as_strategy())
            def no_5xx(case: schemathesis.Case) -> None:
                answer = _bounded_stream(client, case, server_url)
                assert int(answer.split(" ", 1)[0]) < 500, f"{case.formatted_path} -> {answer}"

            no_5xx()
            fuzzed += 1
    assert fuzzed == len(STREAMS), "watch, replay and aggregate were all fuzzed"

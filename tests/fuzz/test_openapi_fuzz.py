"""schemathesis against the served OpenAPI document: every answer conforms to it.

Generated requests go to a real server on 127.0.0.1, a small example budget per operation
(valid requests, plus invalid bodies where an operation takes one). Each answer must be
documented: its status code, its content type, its headers and its body, and no 5xx. The
streams (watch, replay, aggregate) never end by design: schemathesis reads at most
:data:`STREAM_EVENTS` events of each, for at most :data:`STREAM_READ_SECONDS`, and checks
each event read against the document's event schema (name and JSON data).

The document's own request examples are checked the same way, notify first, so that the
replays deliver stored notifications and their CloudEvents are checked too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from tests.conformance.auth_support import document as auth_document
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.openapi import served_document
from tests.support.server import running_server

CONFIG = with_changes(API_EXAMPLE, watch_endpoint={"replay_batch_delay_ms": 0})
BUDGET = settings(
    max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    unsupported_method,
    allow_header_conformance,
]
"""Every check that judges one answer against the document. Left out: the data-acceptance
checks (the document cannot express every rule of a schema's identifier, so a request it
allows may still be refused), and the stateful and authorisation ones."""
STREAM_EVENTS = 3
STREAM_READ_SECONDS = 2.0
"""The request timeout of the streams: a quiet stream (a live watch between heartbeats) is
read this long."""
STREAMS = (
    "/api/v1/watch",
    "/api/v1/replay",
    "/api/v1/aggregate",
    "/api/v1/subscriptions/{name}/events",
)
REQUEST_SECONDS = 10.0
OPERATIONS = [
    (method.upper(), path)
    for path, item in served_document(CONFIG)["paths"].items()
    for method in item
]


def _loaded(server_url: str) -> Any:
    document = httpx.get(f"{server_url}/api-docs/openapi.json").json()
    loaded = schemathesis.openapi.from_dict(document)
    loaded.config.max_stream_events = STREAM_EVENTS
    return loaded


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with running_server(CONFIG) as server:
        yield server.url


@pytest.fixture(scope="module")
def schema(server_url: str) -> Any:
    return _loaded(server_url)


@pytest.fixture(scope="module")
def auth_server_url() -> Iterator[str]:
    """Auth on (direct mode, against the loopback auth-o-tron double): generated requests
    carry no credential or a made-up one, so they meet the 401 and 403 answers."""
    with fake_auth_o_tron() as aot, running_server(auth_document("direct", aot.url)) as server:
        yield server.url


@pytest.fixture(scope="module")
def auth_schema(auth_server_url: str) -> Any:
    return _loaded(auth_server_url)


def _takes_a_body(operation: Any) -> bool:
    # Path parameters are any text: there is no invalid one to generate.
    return "requestBody" in operation.definition.raw


def _check_answers(server_url: str, schema: Any, method: str, path: str) -> None:
    operation = schema[path][method]
    timeout = STREAM_READ_SECONDS if path in STREAMS else REQUEST_SECONDS
    modes = [schemathesis.GenerationMode.POSITIVE]
    if _takes_a_body(operation):
        modes.append(schemathesis.GenerationMode.NEGATIVE)
    for mode in modes:

        @BUDGET
        @given(case=operation.as_strategy(mode))
        def conforms(case: schemathesis.Case) -> None:
            case.call_and_validate(base_url=server_url, checks=CHECKS, timeout=timeout)

        conforms()


IDS = [f"{method} {path}" for method, path in OPERATIONS]


def _example_cases(operation: Any) -> Iterator[schemathesis.Case]:
    definition = operation.definition.raw
    path_parameters = {
        parameter["name"]: parameter["example"]
        for parameter in definition.get("parameters", [])
        if parameter["in"] == "path" and "example" in parameter
    }
    content = definition.get("requestBody", {}).get("content", {}).get("application/json", {})
    bodies = [example["value"] for example in content.get("examples", {}).values()]
    if bodies:
        for body in bodies:
            yield operation.Case(
                path_parameters=path_parameters, body=body, media_type="application/json"
            )
    else:
        yield operation.Case(path_parameters=path_parameters)


def test_answers_to_the_examples_conform_to_the_document(server_url: str, schema: Any) -> None:
    # Notify first: the replays then deliver what it stored. Deletes last: the other
    # examples use what they delete (a subscription the PUT example created).
    ordered = sorted(
        OPERATIONS,
        key=lambda operation: (operation[1] != "/api/v1/notification", operation[0] == "DELETE"),
    )
    checked = 0
    for method, path in ordered:
        timeout = STREAM_READ_SECONDS if path in STREAMS else REQUEST_SECONDS
        operation = schema[path][method]
        successes = {int(code) for code in operation.definition.raw["responses"] if code[0] == "2"}
        for case in _example_cases(operation):
            response = case.call_and_validate(base_url=server_url, checks=CHECKS, timeout=timeout)
            assert response.status_code in successes, f"{method} {path}: {response.text[:300]}"
            checked += 1
    assert checked > len(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=IDS)
def test_answers_conform_to_the_document(
    server_url: str, schema: Any, method: str, path: str
) -> None:
    _check_answers(server_url, schema, method, path)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=IDS)
def test_answers_conform_to_the_document_with_auth_on(
    auth_server_url: str, auth_schema: Any, method: str, path: str
) -> None:
    _check_answers(auth_server_url, auth_schema, method, path)

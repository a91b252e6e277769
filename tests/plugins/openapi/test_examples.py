"""Every request example of the served API description is accepted by the server serving it.

The server runs the shipped configuration (``configuration/config.yaml``, on a free port),
and the same without its schemas.
Each example is sent as Swagger UI's "Try it out" would send it: notify examples first (so
that the replays and the admin examples find history), then the streams (the stream must
open: 200 and a first event, read with a bounded read), then the remaining operations.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from tests.support.server import RunningServer, running_server

SHIPPED_CONFIG = Path(__file__).resolve().parents[3] / "configuration" / "config.yaml"
READ_TIMEOUT = httpx.Timeout(10.0)
MAX_FIRST_EVENT_BYTES = 65_536
# The first event of each stream, by path: (SSE event name, data "type").
FIRST_EVENTS = {
    "/api/v1/watch": ("live-notification", "connection_established"),
    "/api/v1/replay": ("replay-control", "replay_started"),
    "/api/v1/aggregate": ("aggregate", "snapshot"),
}


def _shipped(with_schemas: bool) -> dict[str, Any]:
    document = yaml.safe_load(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    document["application"]["port"] = 0
    if not with_schemas:
        del document["notification_schema"]
    return document


@pytest.fixture(scope="module", params=[True, False], ids=["shipped", "shipped_without_schemas"])
def server(request: pytest.FixtureRequest) -> Iterator[RunningServer]:
    with running_server(_shipped(request.param)) as running:
        yield running


@pytest.fixture(scope="module")
def document(server: RunningServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/api-docs/openapi.json", timeout=READ_TIMEOUT)
    assert response.status_code == 200
    return response.json()


def _body_examples(operation: dict[str, Any]) -> dict[str, Any]:
    content = operation.get("requestBody", {}).get("content", {})
    return {
        name: example["value"]
        for name, example in content.get("application/json", {}).get("examples", {}).items()
    }


def _path_with_examples(path: str, operation: dict[str, Any]) -> str:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", parameter["example"])
    return path


def _first_event(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """The first ``event:`` / ``data:`` pair of an SSE stream, read line by line."""
    name, data, read = None, None, 0
    for line in response.iter_lines():
        read += len(line) + 1
        assert read <= MAX_FIRST_EVENT_BYTES, "no complete first event"
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = json.loads(line.removeprefix("data: "))
        elif line == "" and name is not None:
            break
    assert name is not None and data is not None, "the stream ended without an event"
    return name, data


def _operations(document: dict[str, Any], method: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        if method in item:
            yield path, item[method]


def test_the_document_built_from_the_shipped_configuration_is_valid(
    document: dict[str, Any],
) -> None:
    validate(document)


def test_there_are_examples_for_every_event_type(
    document: dict[str, Any], server: RunningServer
) -> None:
    # Without schemas, the examples use an event type of their own (any is accepted).
    event_types = set(server.service.catalog.event_types) or {"example"}
    notify = document["paths"]["/api/v1/notification"]["post"]
    assert {body["event_type"] for body in _body_examples(notify).values()} == event_types
    for path in FIRST_EVENTS:
        examples = _body_examples(document["paths"][path]["post"])
        assert {body["event_type"] for body in examples.values()} == event_types, path


def test_every_request_example_is_accepted(document: dict[str, Any], server: RunningServer) -> None:
    sent = 0
    with httpx.Client(base_url=server.url, timeout=READ_TIMEOUT) as client:
        notify = document["paths"]["/api/v1/notification"]["post"]
        for name, body in _body_examples(notify).items():
            response = client.post("/api/v1/notification", json=body)
            assert response.status_code == 200, f"notify {name}: {response.text}"
            assert response.json()["status"] == "success"
            sent += 1

        for path, (event, kind) in FIRST_EVENTS.items():
            for name, body in _body_examples(document["paths"][path]["post"]).items():
                with client.stream("POST", path, json=body) as response:
                    if response.status_code != 200:
                        response.read()
                    assert response.status_code == 200, f"{path} {name}: {response.text}"
                    assert response.headers["content-type"] == "text/event-stream"
                    first = _first_event(response)
                    assert (first[0], first[1].get("type")) == (event, kind), f"{path} {name}"
                sent += 1

        for path, operation in _operations(document, "put"):
            url = _path_with_examples(path, operation)
            for name, body in _body_examples(operation).items():
                response = client.put(url, json=body)
                assert response.status_code == 201, f"put {url} {name}: {response.text}"
                sent += 1

        # The admin examples come last: they delete what the others rely on.
        remaining = [
            (method, path, operation)
            for method in ("get", "delete")
            for path, operation in _operations(document, method)
        ]
        for method, path, operation in remaining:
            bodies = _body_examples(operation)
            has_path_example = any(
                p["in"] == "path" and "example" in p for p in operation.get("parameters", [])
            )
            streams = "text/event-stream" in operation["responses"].get("200", {}).get(
                "content", {}
            )
            if (not bodies and not has_path_example) or streams:
                continue
            url = _path_with_examples(path, operation)
            # The documented success: a deleted subscription has no body to show.
            success = 204 if "204" in operation["responses"] else 200
            for name, body in (bodies or {"path": None}).items():
                response = client.request(method.upper(), url, json=body)
                assert response.status_code == success, f"{method} {url} {name}: {response.text}"
                sent += 1
    assert sent >= 6, "the examples were found"

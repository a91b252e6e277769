"""A request served by a real aviso server leaves no reference cycle behind.

Everything a request built is freed by reference counting once it is answered. A cycle
through the request (the scope keeping the server's request cycle, which keeps the scope)
would be freed only by the garbage collector, whose passes over the whole heap then come
with every few hundred requests: on the notify path that cost more than the endpoint
itself. With the collector off, request cycles still alive after the requests are the
ones left in such cycles.
"""

from __future__ import annotations

import gc
import http.client
import json
from collections.abc import Iterator

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from tests.support.configs import API_EXAMPLE
from tests.support.server import RunningServer, running_server

REQUESTS = 30

NOTIFY = json.dumps(
    {"event_type": "river_gauge", "identifier": {"basin": "Danube", "date": "20250101", "level": 3}}
)
ASKED = [
    ("POST", "/api/v1/notification", NOTIFY, 200),
    ("POST", "/api/v1/notification", "{not json", 400),
    ("POST", "/api/v1/notification", json.dumps({"event_type": "nope"}), 400),
    ("GET", "/health", None, 200),
    ("GET", "/api/v1/nowhere", None, 404),
]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with running_server(API_EXAMPLE) as running:
        yield running


def live_cycles() -> int:
    return sum(isinstance(thing, RequestResponseCycle) for thing in gc.get_objects())


@pytest.mark.parametrize(("method", "path", "body", "status"), ASKED)
def test_answered_requests_leave_no_cycle_to_collect(
    server: RunningServer, method: str, path: str, body: str | None, status: int
) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json"}
    try:
        connection.request(method, path, body, headers)  # warm-up: caches, first imports
        assert connection.getresponse().read() is not None
        gc.collect()
        gc.disable()
        try:
            before = live_cycles()
            for _ in range(REQUESTS):
                connection.request(method, path, body, headers)
                answer = connection.getresponse()
                answer.read()
                assert answer.status == status
            left = live_cycles() - before
        finally:
            gc.enable()
    finally:
        connection.close()
    # The connection's current request may still be held by its protocol, nothing more.
    assert left <= 1

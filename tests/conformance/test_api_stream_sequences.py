"""Sequences are consecutive per stream on both backends.

ECMWF's client pyaviso 2.4.2 requires an unfiltered listener (``identifier: {}``) to see N,
N+1, ... and stops with ``HistoryGapError(sequence_jump)`` otherwise; notifications of other
event types must not consume numbers of this one. Each test gets fresh streams (unique
topic bases), so both backends number from 1.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pyaviso
import pytest

from tests.conformance.helpers import notify, replay_all
from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server


def _schema(base: str) -> dict[str, Any]:
    return {
        "payload": {"required": False},
        "topic": {"base": base, "key_order": ["n"]},
        "identifier": {"n": {"type": "IntHandler", "required": False}},
    }


@pytest.fixture
def server(for_backend: ForBackend) -> Iterator[RunningServer]:
    run = uuid.uuid4().hex[:10]
    document = {
        "application": {"host": "127.0.0.1", "port": 0},
        "notification_backend": {
            "kind": "in_memory",
            "in_memory": {"max_history_per_topic": 100},
        },
        "notification_schema": {"alpha": _schema(f"a{run}"), "beta": _schema(f"b{run}")},
    }
    with running_server(for_backend(document)) as running:
        yield running


def test_other_event_types_do_not_consume_a_stream_s_numbers(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        for n, event_type in enumerate(["alpha", "beta", "beta", "alpha", "beta", "alpha"]):
            notify(client, event_type, {"n": n})
        alpha = replay_all(client, "alpha", {}, "1").notifications()
        beta = replay_all(client, "beta", {}, "1").notifications()
    assert [event.data["id"] for event in alpha] == ["alpha@1", "alpha@2", "alpha@3"]
    assert [event.data["id"] for event in beta] == ["beta@1", "beta@2", "beta@3"]


def test_an_unfiltered_pyaviso_listener_survives_other_event_types(
    server: RunningServer,
) -> None:
    """The reported failure: ``aviso listen --event alpha --identifiers '{}'`` died with
    ``SequenceJump { expected: 2, observed: 3 }`` once a beta notification was published."""
    aviso = pyaviso.AvisoClient(base_url=server.url, auth=pyaviso.Anonymous(), timeout=10)
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        notify(client, "alpha", {"n": 1})
        notify(client, "beta", {"n": 1})
        notify(client, "alpha", {"n": 2})
        with (
            aviso.listen("alpha", filter={}, start_from=0) as listener,
            ThreadPoolExecutor(1) as reader,
        ):
            replayed = [reader.submit(next, listener).result(timeout=30) for _ in range(2)]
            # Live now: another beta between two alphas.
            notify(client, "beta", {"n": 2})
            notify(client, "alpha", {"n": 3})
            live = reader.submit(next, listener).result(timeout=30)
    assert [(item.event_type, item.sequence) for item in [*replayed, live]] == [
        ("alpha", 1),
        ("alpha", 2),
        ("alpha", 3),
    ]

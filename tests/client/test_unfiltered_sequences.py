"""An unfiltered pyaviso listener (``identifier: {}``) needs consecutive sequences in its
stream: after ``from_id=N`` the first notification must be ``N``, then ``N+1``, and so on.
Another event type published in between must not take a sequence
number from this stream.

Needs per-stream sequences on the in-memory backend; on a branch where
in-memory sequences are global the in-memory case fails with pyaviso's HistoryGapError.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pyaviso
import pytest

from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server

CONFIG = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {
        "kind": "in_memory",
        "in_memory": {"max_history_per_topic": 1000, "max_topics": 1000},
    },
    "watch_endpoint": {"replay_batch_delay_ms": 0},
    "notification_schema": {
        event_type: {
            "payload": {"required": False},
            "topic": {"base": base, "key_order": ["name"]},
            "identifier": {"name": {"type": "StringHandler", "required": False}},
        }
        for event_type, base in (("useq_alpha", "useqalpha"), ("useq_beta", "useqbeta"))
    },
}


@pytest.fixture(scope="module")
def two_streams(for_backend: ForBackend) -> Iterator[RunningServer]:
    with running_server(for_backend(CONFIG)) as server:
        yield server


def _send(http: httpx.Client, event_type: str, n: int) -> None:
    body = {"event_type": event_type, "identifier": {"name": "x"}, "payload": n}
    answer = http.post("/api/v1/notification", json=body)
    assert answer.status_code == 200, answer.text


def _last_sequence(client: pyaviso.AvisoClient, event_type: str) -> int:
    every = list(client.listen(event_type, filter={}, start_from=0, mode="replay_only"))
    return every[-1].sequence if every else 0


def test_an_unfiltered_listener_sees_consecutive_sequences(two_streams: RunningServer) -> None:
    with (
        httpx.Client(base_url=two_streams.url, timeout=10.0) as http,
        pyaviso.AvisoClient(base_url=two_streams.url, auth=pyaviso.Anonymous()) as client,
    ):
        _send(http, "useq_beta", 0)
        _send(http, "useq_alpha", 0)
        start = _last_sequence(client, "useq_alpha")
        # Interleaved with the other event type, both in the replayed history and live.
        _send(http, "useq_beta", 1)
        _send(http, "useq_alpha", 1)
        _send(http, "useq_beta", 2)
        with client.listen("useq_alpha", filter={}, start_from=start) as live:
            first = next(live)
            _send(http, "useq_beta", 3)
            _send(http, "useq_alpha", 2)
            second = next(live)
    assert (first.sequence, first.payload) == (start + 1, 1)
    assert (second.sequence, second.payload) == (start + 2, 2)
    # The replay-only path checks the same rule from the very first sequence.
    assert [n.payload for n in replayed(two_streams, "useq_alpha")] == [0, 1, 2]


def test_an_unfiltered_listener_resuming_beyond_the_end_tolerates_the_gap(
    two_streams: RunningServer,
) -> None:
    """A resume point past the stream's end (kept across an in-memory restart): the
    server's ``history_gap`` is ignored and the replay is empty, no HistoryGapError."""
    with httpx.Client(base_url=two_streams.url, timeout=10.0) as http:
        _send(http, "useq_alpha", 9)
    with pyaviso.AvisoClient(base_url=two_streams.url, auth=pyaviso.Anonymous()) as client:
        listened = client.listen("useq_alpha", filter={}, start_from=10**9, mode="replay_only")
        assert list(listened) == []


def replayed(server: RunningServer, event_type: str) -> list[pyaviso.Notification]:
    with pyaviso.AvisoClient(base_url=server.url, auth=pyaviso.Anonymous()) as client:
        return list(client.listen(event_type, filter={}, start_from=0, mode="replay_only"))

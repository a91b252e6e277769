"""Several ``aviso-server serve`` processes on one nats-server share everything stored."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    ids,
    notify,
    notify_ok,
    replay,
    stream_state,
    unique,
    watching,
)
from tests.support.nats import NatsServer

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

EVERYTHING = {"n": "*"}


@pytest.fixture(scope="module")
def pair(
    module_nats: NatsServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Aviso, Aviso]]:
    """Two aviso processes with the same configuration on the same nats-server."""
    config = document(module_nats.url)
    with (
        aviso_serving(tmp_path_factory.mktemp("aviso-a"), config) as first,
        aviso_serving(tmp_path_factory.mktemp("aviso-b"), config) as second,
    ):
        yield first, second


def test_a_watch_on_one_instance_receives_what_the_other_stores(
    pair: tuple[Aviso, Aviso],
) -> None:
    a, b = pair
    event_type = unique("pair")
    with (
        a.client() as a_http,
        b.client() as b_http,
        a.client() as a_watch_http,
        b.client() as b_watch_http,
        watching(a_watch_http, event_type, EVERYTHING) as on_a,
        watching(b_watch_http, event_type, EVERYTHING) as on_b,
    ):
        for n in range(6):
            notify_ok(b_http if n % 2 == 0 else a_http, event_type, {"n": n}, {"via": "ab"[n % 2]})
        expected = [f"{event_type}@{sequence}" for sequence in range(1, 7)]
        assert ids(on_a.collect(6)) == expected
        assert ids(on_b.collect(6)) == expected
        assert [e["data"]["payload"]["via"] for e in on_a.notifications()] == list("ababab")


def test_a_replay_on_either_instance_returns_the_same_history(
    pair: tuple[Aviso, Aviso],
) -> None:
    a, b = pair
    event_type = unique("hist")
    with a.client() as a_http, b.client() as b_http:
        for n in range(10):
            notify_ok(a_http if n < 5 else b_http, event_type, {"n": n}, {"n": n})
        on_a = replay(a_http, event_type, EVERYTHING)
        on_b = replay(b_http, event_type, EVERYTHING)
    assert on_a == on_b  # the same CloudEvents, byte for byte once parsed (ids, times, data)
    assert ids(on_a) == [f"{event_type}@{sequence}" for sequence in range(1, 11)]
    assert [event["data"]["payload"]["n"] for event in on_a] == list(range(10))


def test_concurrent_first_use_of_a_base_by_two_instances_is_harmless(
    module_nats: NatsServer, pair: tuple[Aviso, Aviso]
) -> None:
    """Both instances create the same new stream at once; every notify succeeds."""
    event_type = unique("race")
    statuses: list[int] = []
    start = threading.Barrier(4)

    def publish(server: Aviso, tag: str) -> None:
        with server.client() as http:
            start.wait(10)
            for n in range(5):
                statuses.append(notify(http, event_type, {"n": f"{tag}{n}"}).status_code)

    threads = [
        threading.Thread(target=publish, args=(server, f"{tag}{index}"))
        for index in range(2)
        for server, tag in zip(pair, "ab", strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [200] * 20, statuses
    assert stream_state(module_nats.url, event_type.upper()).messages == 20
    with pair[1].client() as http:
        assert len(replay(http, event_type, EVERYTHING)) == 20


def test_an_admin_delete_on_one_instance_is_seen_by_the_other(pair: tuple[Aviso, Aviso]) -> None:
    a, b = pair
    event_type = unique("gone")
    with a.client() as a_http, b.client() as b_http:
        for n in range(3):
            notify_ok(a_http, event_type, {"n": n})
        response = b_http.delete(f"/api/v1/admin/notification/{event_type}@2")
        assert response.status_code == 200, response.text
        assert ids(replay(a_http, event_type, EVERYTHING)) == [
            f"{event_type}@1",
            f"{event_type}@3",
        ]


def test_history_survives_a_restart_of_aviso(module_nats: NatsServer, tmp_path: Path) -> None:
    config = document(module_nats.url)
    event_type = unique("restart")
    with aviso_serving(tmp_path, config) as first, first.client() as http:
        for n in range(3):
            notify_ok(http, event_type, {"n": n}, {"n": n})
        before = replay(http, event_type, EVERYTHING)
    assert first.process.returncode is not None
    with aviso_serving(tmp_path, config) as second, second.client() as http:
        assert replay(http, event_type, EVERYTHING) == before
        notify_ok(http, event_type, {"n": 3})
        assert ids(replay(http, event_type, EVERYTHING))[-1] == f"{event_type}@4"

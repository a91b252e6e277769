"""Fixtures for the JetStream backend tests: real nats-server processes on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.nats import NatsServer, nats_server


@pytest.fixture(scope="module")
def module_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server per test module (tests isolate data with their own topic bases)."""
    with nats_server(tmp_path_factory.mktemp("nats")) as server:
        yield server


@pytest.fixture
def own_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A nats-server for one test, which may stop and restart it on the same port and store;
    killed at teardown whatever state the test left it in."""
    store = tmp_path_factory.mktemp("nats-own")
    server = NatsServer(store)
    server.start()
    try:
        yield server
    finally:
        server.stop(kill=True)

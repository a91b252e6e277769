"""Fixtures for the subscription tests that run on JetStream: a real nats-server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.nats import NatsServer, nats_server


@pytest.fixture(scope="module")
def module_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One nats-server per test module (tests isolate data with their own topic bases)."""
    with nats_server(tmp_path_factory.mktemp("nats")) as server:
        yield server

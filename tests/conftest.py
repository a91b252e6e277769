"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.nats import NatsServer, nats_server


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "backends(*names): run a backend-parametrised conformance test only on these backends",
    )
    config.addinivalue_line(
        "markers",
        "jetstream_bug(reason, strict=True): xfail the jetstream parameter only (a backend bug)",
    )


@pytest.fixture(scope="session")
def nats_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One ``nats-server -js`` for the whole session, started on first use, stopped at the end.

    Streams persist across the tests that share it: tests isolate their data with unique
    identifiers and never assume an empty stream or absolute sequence numbers.
    """
    with nats_server(tmp_path_factory.mktemp("nats-session")) as server:
        yield server

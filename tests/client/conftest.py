"""The pyaviso suite: aviso-py driven only through ECMWF's client, on both backends."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.support import CONFIG, client_env
from tests.conformance.conftest import (  # noqa: F401  (fixtures and the parametrising hook)
    backend,
    for_backend,
    pytest_generate_tests,
)
from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server

_names = itertools.count()


@pytest.fixture(scope="session")
def feed_server(for_backend: ForBackend) -> Iterator[RunningServer]:  # noqa: F811
    """The client suite's schema, one server per backend for the session."""
    with running_server(for_backend(CONFIG)) as server:
        yield server


@pytest.fixture
def name() -> str:
    """An identifier value no other test uses (servers and NATS streams are shared)."""
    return f"t{next(_names)}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def env(tmp_path: Path, feed_server: RunningServer) -> dict[str, str]:
    """pyaviso's environment: a private HOME and ``AVISO_BASE_URL`` at the session server."""
    return client_env(tmp_path / "home", feed_server.url)

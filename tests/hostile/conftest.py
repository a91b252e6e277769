"""The hostile-input suite: every attack found against a fresh install, replayed.

Each case asserts a documented 4xx (or a bounded delay), never a 5xx, and that the service
still answers a valid notify and ``/health`` right after (:func:`assert_still_serving`).
Tests that take the ``backend`` fixture run once per backend, as in the conformance suite.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.conftest import (  # noqa: F401  (fixtures and the parametrising hook)
    backend,
    for_backend,
    pytest_generate_tests,
)
from tests.support.configs import API_EXAMPLE, ForBackend
from tests.support.server import RunningServer, running_server


@pytest.fixture(scope="session")
def hostile_server(for_backend: ForBackend) -> Iterator[RunningServer]:  # noqa: F811
    """The API example schemas with default limits, one per backend for the session."""
    with running_server(for_backend(API_EXAMPLE)) as server:
        yield server


@pytest.fixture
def hostile(hostile_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hostile_server.url, timeout=30.0) as http:
        yield http

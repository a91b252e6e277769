"""Fixtures for the conformance suite: real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.configs import API_EXAMPLE
from tests.support.server import RunningServer, running_server


@pytest.fixture(scope="session")
def api_server() -> Iterator[RunningServer]:
    """The §0.2 example schema (strict), shared: tests isolate data with unique identifiers."""
    with running_server(API_EXAMPLE) as server:
        yield server


@pytest.fixture
def client(api_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=10.0) as http:
        yield http

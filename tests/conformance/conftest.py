"""Fixtures for the conformance suite: real uvicorn servers on 127.0.0.1."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.config_support import Sandbox, sandbox_at
from tests.support.configs import (
    API_EXAMPLE,
    BACKENDS,
    ForBackend,
    jetstream_variant,
    with_changes,
)
from tests.support.server import RunningServer, running_server


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that (directly or through a server fixture) uses ``backend`` runs once per
    backend, ids ``[in_memory]`` / ``[jetstream]``. ``@pytest.mark.backends(...)`` narrows the
    list; ``@pytest.mark.jetstream_bug(reason)`` makes the jetstream run a strict xfail
    (``strict=False`` only where the bug shows up in some runs but not all)."""
    if "backend" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("backends")
    bug = metafunc.definition.get_closest_marker("jetstream_bug")
    params = []
    for name in only.args if only else BACKENDS:
        marks = []
        if bug is not None and name == "jetstream":
            reason = f"BUG(jetstream): {bug.args[0]}"
            strict = bug.kwargs.get("strict", True)
            marks.append(pytest.mark.xfail(strict=strict, reason=reason))
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("backend", params, indirect=True, scope="session")


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend under test (parametrised by ``pytest_generate_tests``)."""
    return request.param


@pytest.fixture(scope="session")
def for_backend(backend: str, request: pytest.FixtureRequest) -> ForBackend:
    """Turns a configuration document into its variant for ``backend`` (a deep copy).

    The shared nats-server is only started when a jetstream-parametrised test runs.
    """
    if backend == "jetstream":
        url = request.getfixturevalue("nats_session").url
        return lambda document: jetstream_variant(document, url)
    return lambda document: copy.deepcopy(dict(document))


@pytest.fixture(scope="session")
def api_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    """The API example schema (strict), shared: tests isolate data with unique identifiers."""
    with running_server(for_backend(API_EXAMPLE)) as server:
        yield server


@pytest.fixture
def client(api_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_server.url, timeout=10.0) as http:
        yield http


@pytest.fixture
def watch_settings() -> dict[str, Any]:
    """The ``watch_endpoint`` overrides of ``custom_server``: none unless a module's own
    fixture or a test's parametrisation gives some."""
    return {}


@pytest.fixture
def custom_server(
    watch_settings: dict[str, Any], for_backend: ForBackend
) -> Iterator[RunningServer]:
    """A server with the example schema and this test's ``watch_endpoint`` overrides."""
    document = with_changes(API_EXAMPLE, watch_endpoint=watch_settings)
    with running_server(for_backend(document)) as server:
        yield server


@pytest.fixture
def custom(custom_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=custom_server.url, timeout=10.0) as http:
        yield http


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    """A sealed working directory and HOME for ``aviso-server`` processes (configuration tests)."""
    with sandbox_at(tmp_path) as box:
        yield box

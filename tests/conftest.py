"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.nats import NatsServer, nats_server

TESTS = Path(__file__).resolve().parent
# The heavy tier (marker ``heavy``): tests whose time goes to starting something big rather
# than to the code under test: a Spark JVM, ``aviso-server`` or ECMWF's client as child
# processes, a nats-server cluster, a package install, mypy. The README's test command runs
# the rest, ``.ci/run`` runs both. Whole directories are heavy here; elsewhere a module says
# ``pytestmark = pytest.mark.heavy`` or a test ``@pytest.mark.heavy``.
HEAVY_DIRECTORIES = frozenset(
    {"benchmarks", "client", "console", "fuzz", "loadtests", "soak", "spark"}
)
# Using one of these fixtures makes a test heavy wherever it lives.
HEAVY_FIXTURES = frozenset({"spark"})
# Markers that imply ``heavy``.
HEAVY_MARKERS = ("install",)
SPARK_TIMEOUT = 900
"""Seconds a Spark test may take unless it sets its own ``timeout``: the session's JVM starts
inside the first test that uses it, and a job's Python workers with it; at a load average of
20-30 on two shared cores that alone took longer than the suite's default bound."""


WORKERS_PER_CPU = 2
"""pytest-xdist workers per CPU for ``-n logical`` / ``-n auto``: most of a worker's time goes
to waiting (tokens expiring on the real clock, heartbeats, deadlines, servers starting and
stopping), so with one worker per CPU the CPUs sat idle most of a run; a second worker per CPU
runs while the first waits. The heavy tier keeps one (``selects_heavy``);
``PYTEST_XDIST_AUTO_NUM_WORKERS`` (pytest-xdist's own) or ``-n N`` still choose the number."""


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    cpus = psutil.cpu_count(logical=config.option.numprocesses == "logical") or os.cpu_count()
    heavy = selects_heavy(str(config.getoption("markexpr") or ""))
    return (1 if heavy else WORKERS_PER_CPU) * (cpus or 1)


def selects_heavy(expression: str) -> bool:
    """Whether a marker expression asks for the heavy tier: its tests compute (a Spark JVM,
    child servers, installs) rather than wait, so it keeps one worker per CPU."""
    return "heavy" in expression.replace("not heavy", "")


def is_heavy(item: pytest.Item) -> bool:
    if item.get_closest_marker("heavy") is not None:
        return True
    if any(item.get_closest_marker(name) is not None for name in HEAVY_MARKERS):
        return True
    if HEAVY_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    return item.path.is_relative_to(TESTS) and (
        item.path.relative_to(TESTS).parts[0] in HEAVY_DIRECTORIES
    )


def uses_spark(item: pytest.Item) -> bool:
    return "spark" in getattr(item, "fixturenames", ()) or item.path.is_relative_to(TESTS / "spark")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker and xdist reads groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("heavy") is None and is_heavy(item):
            item.add_marker(pytest.mark.heavy)
        # One pytest-xdist worker runs every Spark test, in order (``--dist loadgroup`` in
        # pyproject.toml): two local Spark sessions side by side on one machine broke each
        # other's tests, and one JVM is started instead of one per worker.
        if uses_spark(item):
            item.add_marker(pytest.mark.xdist_group("spark"))
            # pytest-timeout interrupting a call into the shared session's JVM leaves its
            # gateway out of step, and every later Spark test on the worker fails with it: a
            # bound only a hang reaches, not the default a loaded machine can eat.
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT))


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

"""``/metrics`` of ``aviso-server serve --workers 2 --embedded-nats DIR``: the supervising
process alone serves ``metrics.port``, with the service's figures whichever worker answered.

Which worker answered what is read from each worker's own multiprocess file, in the private
directory the supervisor creates under ``TMPDIR`` (here the test's own directory).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from aviso_host.config.settings import MetricsSettings
from aviso_host.worker_metrics import SUPERVISOR, WorkerMetrics
from tests.conformance.metrics_support import Scrape, parse
from tests.host.backends.jetstream_support import (
    Aviso,
    Case,
    aviso_serving,
    document,
    notify_ok,
    poll,
    serve_refusals,
    unique,
    watching,
)
from tests.support.process import free_port

pytestmark = pytest.mark.heavy

NOTIFIED = "aviso_notifications_total"
OPEN_STREAMS = "aviso_sse_connections_active"
SUCCESS = {"event_type": "generic", "status": "success"}
OPEN_WATCHES = {"route": "/api/v1/watch", "event_type": "generic"}
NOTIFIES = 20
MAX_REQUESTS = 200
"""Requests on fresh connections sent at most until both workers answered some."""
WAIT = 30.0


def scrape(port: int) -> Scrape:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0)
    assert response.status_code == 200, response.text
    return parse(response.text)


def value(scrape: Scrape, name: str, labels: dict[str, str]) -> float:
    return scrape.value(name, **labels) or 0.0


def per_worker(directory: Path, kind: str, name: str, labels: dict[str, str]) -> dict[int, float]:
    """``name{labels}`` as each worker recorded it, by pid (``kind``: the file's prefix,
    ``counter`` or ``gauge_livesum``); files of exited workers included for counters."""
    found: dict[int, float] = {}
    for path in directory.glob(f"{kind}_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        for metric in MultiProcessCollector.merge([str(path)]):
            for sample in metric.samples:
                if sample.name == name and sample.labels == labels:
                    found[pid] = sample.value
    return found


def worker_labels(scrape: Scrape) -> set[str]:
    return {labels["worker"] for labels in scrape.series("process_resident_memory_bytes")}


def live_workers(directory: Path) -> set[int]:
    """Pids of the workers alive: a worker's live gauges (its build info from its start)
    are dropped when the supervisor sees it exit."""
    return {int(path.stem.rsplit("_", 1)[1]) for path in directory.glob("gauge_livemax_*.db")}


@contextmanager
def service(tmp_path: Path, metrics_port: int) -> Iterator[tuple[Aviso, Path]]:
    """Two workers on an embedded nats-server; yields the service (once one worker serves)
    and the supervisor's multiprocess directory."""
    config = document(None)
    config["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": metrics_port}
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    args = ("--workers", "2", "--embedded-nats", str(tmp_path / "store"))
    with aviso_serving(tmp_path, config, *args, env={"TMPDIR": str(temporary)}) as running:
        (directory,) = temporary.glob("aviso-metrics-*")
        yield running, directory
    assert not directory.exists(), "the supervisor left its multiprocess directory behind"


def notify_until_both_answered(running: Aviso, directory: Path, event_type: str) -> int:
    """Notifies, each on a new connection (the kernel picks a worker for each), until both
    live workers answered at least ``NOTIFIES // 2`` in all (a worker still starting
    answers none); returns how many were sent. A notify is counted before its response
    leaves."""
    sent = 0
    while True:
        live = live_workers(directory)
        counted = per_worker(directory, "counter", NOTIFIED, SUCCESS)
        answered = {pid: counted.get(pid, 0.0) for pid in live}
        if len(live) == 2 and min(answered.values()) >= NOTIFIES // 2:
            return sent
        assert sent < MAX_REQUESTS, f"the workers answered {answered} of {sent} notifies"
        with running.client() as client:
            notify_ok(client, event_type, {"n": str(sent)})
        sent += 1


def watches_on_both(
    running: Aviso, stack: ExitStack, directory: Path, event_type: str
) -> tuple[int, dict[int, float]]:
    """Watches on fresh connections until both workers hold at least one; (how many, the
    streams each worker holds by pid). A stream is counted before its first event."""
    opened = 0
    while True:
        held = per_worker(directory, "gauge_livesum", OPEN_STREAMS, OPEN_WATCHES)
        if len([n for n in held.values() if n > 0]) == 2:
            return opened, held
        assert opened < MAX_REQUESTS, f"the workers hold {held} of {opened} watches"
        client = stack.enter_context(running.client())
        stack.enter_context(watching(client, event_type, {"n": "*"}))
        opened += 1


def test_metrics_count_every_notify_once_whichever_worker_answered(tmp_path: Path) -> None:
    metrics_port = free_port()
    event_type = unique("wm")
    with service(tmp_path, metrics_port) as (running, directory), ExitStack() as stack:
        before = value(scrape(metrics_port), NOTIFIED, SUCCESS)
        sent = notify_until_both_answered(running, directory, event_type)
        counted = scrape(metrics_port)
        assert value(counted, NOTIFIED, SUCCESS) == before + sent
        assert worker_labels(counted) == {SUPERVISOR, "1", "2"}

        opened, held = watches_on_both(running, stack, directory, event_type)
        streaming = scrape(metrics_port)
        assert value(streaming, OPEN_STREAMS, OPEN_WATCHES) == opened
        # The labels of one process: no per-process series outside process_*.
        labelled = {
            name for name, labels in streaming.samples if {"pid", "worker"} & dict(labels).keys()
        }
        assert labelled and all(name.startswith("process_") for name in labelled), labelled

        # A worker killed outright: its streams leave the gauge, its notifies stay counted.
        victim = max(held, key=lambda pid: held[pid])
        os.kill(victim, signal.SIGKILL)
        survivors = opened - held[victim]
        after_kill = poll(
            lambda: (
                s
                if value(s := scrape(metrics_port), OPEN_STREAMS, OPEN_WATCHES) == survivors
                else None
            ),
            WAIT,
            "the killed worker's streams to leave the gauge",
        )
        assert value(after_kill, NOTIFIED, SUCCESS) == before + sent

        # Its replacement starts; the sums go on from where they were.
        poll(lambda: live_workers(directory) - set(held), WAIT, "a replacement worker")
        more = notify_until_both_answered(running, directory, event_type)
        final = scrape(metrics_port)
        assert value(final, NOTIFIED, SUCCESS) == before + sent + more
        assert worker_labels(final) == {SUPERVISOR, "1", "2"}


def test_a_metrics_port_in_use_refuses_the_service_before_any_worker(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = document(None, jetstream={"embedded_store_dir": str(tmp_path / "store")})
        config["application"]["workers"] = 2
        config["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": port}
        refusal = serve_refusals(tmp_path, {"taken": Case(config)})["taken"]
    refusal.assert_refused(f"cannot serve metrics on 127.0.0.1:{port}", "metrics.listener.failed")
    assert "supervisor.started" not in refusal.output


def never_fails(reason: str) -> None:
    raise AssertionError(reason)


def test_with_metrics_disabled_the_supervisor_serves_none_and_workers_get_nothing() -> None:
    metrics = WorkerMetrics(MetricsSettings(enabled=False))
    assert metrics.start(never_fails) == {}
    assert metrics.directory is None
    metrics.worker_started(1)
    metrics.worker_exited(1)
    metrics.stop()


def test_a_failed_start_leaves_no_directory() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = WorkerMetrics(MetricsSettings(enabled=True, host="127.0.0.1", port=port))
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            metrics.start(never_fails)
    assert metrics.directory is None
    metrics.stop()

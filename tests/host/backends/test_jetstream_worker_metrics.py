"""The metrics of several worker processes, summed by the supervising process's listener
(:class:`aviso_host.worker_metrics.WorkerMetrics`), without the supervisor itself: this test
plays the supervisor, starting two ``aviso-server serve`` processes on one JetStream server with
the environment ``WorkerMetrics`` gives workers. Each process still serves its own registry on
a port of its own, so the sums can be checked against what each worker counted.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from aviso_host.config.settings import MetricsSettings
from aviso_host.worker_metrics import SUPERVISOR, WorkerMetrics
from tests.conformance.metrics_support import Scrape, parse
from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    notify_ok,
    unique,
    watching,
)
from tests.support.nats import NatsServer
from tests.support.process import free_port

NOTIFIED = "aviso_notifications_total"
OPEN_STREAMS = "aviso_sse_connections_active"
WATCH_ROUTE = "/api/v1/watch"
GENERIC = {"event_type": "generic", "status": "success"}
OPEN_WATCHES = {"route": WATCH_ROUTE, "event_type": "generic"}


def scrape(port: int) -> Scrape:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10.0)
    assert response.status_code == 200, response.text
    return parse(response.text)


def service_port(metrics: WorkerMetrics) -> int:
    assert metrics.settings.port is not None
    return metrics.settings.port


def value(scrape: Scrape, name: str, labels: dict[str, str]) -> float:
    found = scrape.value(name, **labels)
    return 0.0 if found is None else found


def never_fails(reason: str) -> None:
    raise AssertionError(reason)


@pytest.fixture
def supervisor() -> Iterator[tuple[WorkerMetrics, Mapping[str, str]]]:
    metrics = WorkerMetrics(MetricsSettings(enabled=True, host="127.0.0.1", port=free_port()))
    environment = metrics.start(never_fails)
    try:
        yield metrics, environment
    finally:
        metrics.stop()
    assert metrics.directory is None


def test_the_supervisor_sums_counters_and_open_streams_over_workers(
    tmp_path: Path, module_nats: NatsServer, supervisor: tuple[WorkerMetrics, Mapping[str, str]]
) -> None:
    metrics, environment = supervisor
    assert metrics.directory is not None
    assert environment == {"PROMETHEUS_MULTIPROC_DIR": metrics.directory}
    directory = Path(metrics.directory)
    own_ports = [free_port(), free_port()]
    event_type = unique("wm")
    identifier = {"n": "1"}
    with ExitStack() as stack:
        workers: list[Aviso] = []
        for port in own_ports:
            config = document(module_nats.url)
            config["metrics"] = {"enabled": True, "host": "127.0.0.1", "port": port}
            worker = stack.enter_context(aviso_serving(tmp_path, config, env=environment))
            metrics.worker_started(worker.process.pid)
            workers.append(worker)
        first, second = workers
        with first.client() as a, second.client() as b:
            for _ in range(3):
                notify_ok(a, event_type, identifier)
            for _ in range(2):
                notify_ok(b, event_type, identifier)
            own = [value(scrape(port), NOTIFIED, GENERIC) for port in own_ports]
            assert own == [3.0, 2.0]
            service = scrape(service_port(metrics))
            assert value(service, NOTIFIED, GENERIC) == 5.0
            # Every series of one worker is in the service's scrape, with its labels.
            worker_series = {frozenset(s.items()) for s in scrape(own_ports[0]).series(NOTIFIED)}
            assert worker_series <= {frozenset(s.items()) for s in service.series(NOTIFIED)}

            with watching(a, event_type, identifier), watching(b, event_type, identifier):
                service = scrape(service_port(metrics))
                assert value(service, OPEN_STREAMS, OPEN_WATCHES) == 2.0

                second.kill()
                metrics.worker_exited(second.process.pid)
                after = scrape(service_port(metrics))
                # The dead worker's stream left the gauge; its notifies stay counted.
                assert value(after, OPEN_STREAMS, OPEN_WATCHES) == 1.0
                assert value(after, NOTIFIED, GENERIC) == 5.0
                notify_ok(a, event_type, identifier)
                assert value(scrape(service_port(metrics)), NOTIFIED, GENERIC) == 6.0
        labels = {s["worker"] for s in after.series("process_resident_memory_bytes")}
        assert labels == {SUPERVISOR, "1"}
    assert directory.is_dir()


def test_a_metrics_port_in_use_is_refused_before_any_worker_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = WorkerMetrics(MetricsSettings(enabled=True, host="127.0.0.1", port=port))
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            metrics.start(never_fails)
    assert metrics.directory is None
    metrics.stop()


def test_with_metrics_disabled_workers_get_nothing() -> None:
    metrics = WorkerMetrics(MetricsSettings(enabled=False))
    assert metrics.start(never_fails) == {}
    assert metrics.directory is None
    metrics.worker_started(1)
    metrics.worker_exited(1)
    metrics.stop()

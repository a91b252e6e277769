"""``/metrics`` of a service run as several worker processes (``serve --workers N``): the
supervising process alone serves the workers' multiprocess files, merged, and each process's
own metrics (docs/metrics.md, "Several workers").
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from aviso_host.config.settings import LimitSettings, MetricsSettings
from aviso_host.logs import log_event
from aviso_host.metrics import MULTIPROCESS_DIRECTORY_VARIABLE
from aviso_host.server import MetricsListener

WORKER_LABEL = "worker"
SUPERVISOR = "supervisor"
"""The ``worker`` label of the supervising process's own process metrics."""
STOP_TIMEOUT_SECONDS = 10.0


class WorkerProcesses:
    """``process_*`` of the supervisor and of each live worker, one series per ``worker``
    label: workers are numbered from 1 in start order, a replacement taking the lowest free
    number, so the label set stays bounded however often workers are replaced."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[int, tuple[str, ProcessCollector]] = {}
        self._own = ProcessCollector(registry=None)

    def started(self, pid: int) -> str:
        """Report ``pid``'s process metrics from now on; returns its ``worker`` label."""
        with self._lock:
            taken = {label for label, _ in self._workers.values()}
            number = next(n for n in range(1, len(taken) + 2) if str(n) not in taken)
            label = str(number)
            self._workers[pid] = (label, ProcessCollector(pid=lambda: pid, registry=None))
            return label

    def exited(self, pid: int) -> None:
        with self._lock:
            self._workers.pop(pid, None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            collectors = [(SUPERVISOR, self._own), *sorted(self._workers.values())]
        merged: dict[str, Metric] = {}
        for label, collector in collectors:
            # Nothing for a worker that just exited (its /proc entry is gone).
            for family in collector.collect():
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type
                    )
                for sample in family.samples:
                    labels = {**sample.labels, WORKER_LABEL: label}
                    into.add_sample(sample.name, labels, sample.value)
        yield from merged.values()


class ServiceExposition:
    """One scrape of the whole service: the workers' files merged, the process metrics."""

    def __init__(self, directory: str, processes: WorkerProcesses) -> None:
        self.registry = CollectorRegistry()
        MultiProcessCollector(self.registry, path=directory)
        self.registry.register(processes)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class WorkerMetrics:
    """The supervising process's side of ``/metrics`` under ``serve --workers``.

    ``start()`` before the first worker starts (what it returns goes into every worker's
    environment), ``worker_started(pid)``/``worker_exited(pid)`` as workers come and go,
    ``stop()`` after the last worker has exited. With ``metrics.enabled: false`` every call
    does nothing and the workers get no extra environment.
    """

    def __init__(self, settings: MetricsSettings, limits: LimitSettings | None = None) -> None:
        """``limits``: the service's, which the listener enforces as the workers do."""
        self.settings = settings
        self.limits = limits
        self.enabled = bool(settings.enabled and settings.port)
        self.processes = WorkerProcesses()
        self.directory: str | None = None
        self._listener: MetricsListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, fail: Callable[[str], None]) -> Mapping[str, str]:
        """Create the private directory and serve ``metrics.host:metrics.port`` on a thread
        of this process; return what every worker's environment adds (it must be there
        before the worker imports prometheus-client: a spawned process, not a fork of this
        one). A port that cannot be bound is logged (``metrics.listener.failed``) and raised
        as ``OSError``: the service must not start. (``fail`` is not needed: once serving,
        nothing here can lose the service.)"""
        if not self.enabled or self.directory is not None:
            return self._environment()
        self.directory = tempfile.mkdtemp(prefix="aviso-metrics-")
        host, port = self.settings.host, self.settings.port
        assert port is not None  # enabled
        listener = MetricsListener(
            ServiceExposition(self.directory, self.processes), host, port, self.limits
        )
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(listener.start())
        except OSError as exc:
            loop.close()
            self._remove_directory()
            message = f"cannot serve metrics on {host}:{port}: {exc}"
            log_event("metrics.listener.failed", message, logging.ERROR)
            raise OSError(message) from exc
        self._listener, self._loop = listener, loop
        self._thread = threading.Thread(target=loop.run_forever, name="aviso-metrics", daemon=True)
        self._thread.start()
        return self._environment()

    def _environment(self) -> Mapping[str, str]:
        if self.directory is None:
            return {}
        return {MULTIPROCESS_DIRECTORY_VARIABLE: self.directory}

    def worker_started(self, pid: int) -> None:
        if self.directory is not None:
            self.processes.started(pid)

    def worker_exited(self, pid: int) -> None:
        """Drop the exited worker's live gauges (its open streams, requests in flight) and
        process metrics; its counters stay in the sums."""
        if self.directory is not None:
            self.processes.exited(pid)
            mark_process_dead(pid, self.directory)

    def stop(self) -> None:
        """Stop serving and remove the directory; never raises (idempotent)."""
        loop, thread, listener = self._loop, self._thread, self._listener
        self._loop = self._thread = self._listener = None
        if loop is not None and thread is not None and listener is not None:
            try:
                stopping = asyncio.run_coroutine_threadsafe(listener.stop(), loop)
                stopping.result(STOP_TIMEOUT_SECONDS)
            except Exception as exc:  # a scrape that would not end: the process exits anyway
                log_event(
                    "metrics.listener.stop_failed", f"metrics listener: {exc!r}", logging.WARNING
                )
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(STOP_TIMEOUT_SECONDS)
                if not thread.is_alive():
                    loop.close()
        self._remove_directory()

    def _remove_directory(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

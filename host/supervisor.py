"""``aviso-server serve --workers N``: N worker processes under one supervising process.

The supervisor runs what the workers share (:class:`SupervisorExtension`: the backend's
shared resources such as an embedded nats-server, and anything else that must exist once
per service), then starts the workers (:mod:`aviso_host.worker`), each listening on the
service's address through its own ``SO_REUSEPORT`` socket. It accepts no connection itself.
How it replaces, drains, kills and gives up on workers: docs/deployment.md, "Several
replicas".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from types import FrameType
from typing import Protocol

from aviso_host.config import ConfigError
from aviso_host.config.construct import construct
from aviso_host.config.loader import ENV_PREFIX, ENV_SEPARATOR
from aviso_host.config.settings import Settings
from aviso_host.lifecycle import WORKER_ENTRY
from aviso_host.logs import log_event
from aviso_host.plugins import PluginRegistry
from aviso_host.server import GRACEFUL_SHUTDOWN_SECONDS
from aviso_host.worker import READY, reuse_port_socket
from aviso_host.worker_metrics import WorkerMetrics
from aviso_plugins.types import SharedResources

AUTO = "auto"
STARTUP_FAILURES = 3
"""Workers in a row that exit before serving (no worker started serving in between)."""
CRASH_WINDOW = 60.0
CRASHES_PER_WORKER = 5
"""Exits of serving workers tolerated per worker within ``CRASH_WINDOW`` seconds."""
WORKERS_PER_CPU = 8
"""At most this many workers per usable CPU: each is a whole interpreter (tens of MiB), and
more than a few per CPU only add memory and start-up time."""
STOP_DEADLINE_SECONDS = GRACEFUL_SHUTDOWN_SECONDS + 10
"""After a stop signal, workers still running this long are killed: a worker drains for at
most ``GRACEFUL_SHUTDOWN_SECONDS``, then closes its backend connection."""

Fail = Callable[[str], None]


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    usable = getattr(os, "sched_getaffinity", None)  # Linux
    return len(usable(0)) if usable is not None else os.cpu_count() or 1


def worker_count(value: int | str) -> int:
    """``application.workers`` (or ``--workers``) as a number: ``auto`` is one per usable
    CPU. ``ConfigError`` above ``WORKERS_PER_CPU`` per usable CPU."""
    if value == AUTO:
        return usable_cpus()
    count, cpus = int(value), usable_cpus()
    if count > WORKERS_PER_CPU * cpus:
        raise ConfigError(
            f"application.workers: {count} workers is more than {WORKERS_PER_CPU} per CPU "
            f"({WORKERS_PER_CPU * cpus} for the {cpus} CPUs this process may use); use auto "
            "(one per CPU) or fewer"
        )
    return count


def refuse_process_local_backend(
    settings: Settings, registry: PluginRegistry, workers: int
) -> None:
    """``ConfigError`` when several workers would each keep a history of their own."""
    kind = settings.backend.kind
    if workers > 1 and not registry.backends[kind].shared_between_processes:
        # "auto" resolves per machine: say what it became, or the refusal seems arbitrary.
        count = f"{workers} workers"
        if settings.application.workers == AUTO:
            count = f"auto ({count} on this machine)"
        raise ConfigError(
            f"application.workers: {count}, but the {kind!r} backend keeps its "
            "notifications inside each process (every worker would have its own history); "
            "use 1 worker, or a backend shared between processes such as jetstream"
        )


class SupervisorExtension(Protocol):
    """Something that runs once per service, in the supervising process, beside the workers.

    Started in order before the first worker starts, stopped in reverse order after the last
    one exited. The defaults do nothing (for a class that derives from this one)."""

    def start(self, fail: Fail) -> Mapping[str, str]:
        """Start; return environment variables every worker gets. ``fail(reason)``, from any
        thread, stops the service, which then exits non-zero with ``reason``."""
        return {}

    def worker_started(self, pid: int) -> None:
        """A worker process was started (it may not serve yet)."""
        return None  # a body: a protocol's empty method would be abstract

    def worker_exited(self, pid: int) -> None:
        """A worker process ended (it is reaped; a replacement may follow)."""
        return None  # a body: a protocol's empty method would be abstract

    def stop(self) -> None:
        """Release everything; must not raise."""
        return None  # a body: a protocol's empty method would be abstract


class SharedBackend(SupervisorExtension):
    """The selected backend's shared resources (``aviso_backend_shared_resources``), their
    option overrides handed to the workers as ``AVISOSERVER_NOTIFICATION_BACKEND__*``."""

    def __init__(self, settings: Settings, registry: PluginRegistry) -> None:
        self._kind = kind = settings.backend.kind
        hook = registry.manager.hook if registry.manager is not None else None
        # Refusing its options is the plugin's ValueError: one line, as for the backend.
        found = (
            construct(
                lambda: hook.aviso_backend_shared_resources(
                    kind=kind, options=settings.backend.options
                ),
                ("notification_backend", kind),
                registry.describe("backends", kind),
                settings.secrets,
            )
            if hook is not None
            else []
        )
        self._resources: list[SharedResources] = [item for item in found if item is not None]
        self._started: list[SharedResources] = []

    def start(self, fail: Fail) -> Mapping[str, str]:
        environment: dict[str, str] = {}
        prefix = ENV_SEPARATOR.join((f"{ENV_PREFIX}NOTIFICATION_BACKEND", self._kind.upper(), ""))
        for resource in self._resources:
            overrides = resource.start(fail)
            self._started.append(resource)
            environment.update({prefix + key.upper(): value for key, value in overrides.items()})
        return environment

    def stop(self) -> None:
        while self._started:
            self._started.pop().stop()


def service_extensions(
    settings: Settings, registry: PluginRegistry, workers: int = 1
) -> list[SupervisorExtension]:
    """What the supervising process runs beside ``workers`` workers, in start order (one
    process serves ``metrics.port`` itself)."""
    extensions: list[SupervisorExtension] = [SharedBackend(settings, registry)]
    if workers > 1:
        # First: a metrics port in use refuses the service before anything else starts.
        extensions.insert(0, WorkerMetrics(settings.metrics, settings.limits))
    return extensions


def start_extensions(
    extensions: Sequence[SupervisorExtension], fail: Fail
) -> tuple[list[SupervisorExtension], dict[str, str]]:
    """Start ``extensions`` in order; (those started, the workers' environment). On an error
    the ones already started are stopped before it propagates."""
    started: list[SupervisorExtension] = []
    environment: dict[str, str] = {}
    try:
        for extension in extensions:
            environment.update(extension.start(fail))
            started.append(extension)
    except BaseException:
        stop_extensions(started)
        raise
    return started, environment


def stop_extensions(started: list[SupervisorExtension]) -> None:
    while started:
        extension = started.pop()
        try:
            extension.stop()
        except Exception as exc:  # stopping the rest matters more
            log_event("supervisor.stop.failed", f"stopping {extension!r} failed: {exc}")


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    ready: int
    """The supervisor's end of the pipe the worker says ``READY`` on; its end of file is the
    worker's exit (the worker holds the other end for its whole life, as the sentinels of
    ``multiprocessing`` work)."""
    serving: bool = False

    def read(self) -> bool:
        """Take what the worker said; whether it exited (end of file)."""
        try:
            while said := os.read(self.ready, 64):
                self.serving = self.serving or READY in said
        except BlockingIOError:  # nothing more for now
            return False
        return True


class Supervisor:
    def __init__(
        self,
        host: str,
        port: int,
        workers: int,
        extensions: Sequence[SupervisorExtension] = (),
    ) -> None:
        self.host = host
        self.port = port
        self.workers = workers
        self.failure: str | None = None
        """Why the service stopped on its own (``None``: it was asked to, or is running)."""
        self._extensions = list(extensions)
        self._running: dict[int, _Worker] = {}
        self._signals = 0
        self._forwarded = 0
        self._deadline: float | None = None
        self._unclean = False
        self._startup_failures = 0
        self._crashes: deque[float] = deque()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)

    # -- from signal handlers and other threads ----------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # already awake
            os.write(self._wake_write, b"\0")

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        self._wake()

    def fail(self, reason: str) -> None:
        """Stop the service: the workers drain, then the supervisor exits non-zero."""
        if self.failure is None:
            self.failure = reason
            log_event("supervisor.failed", reason, logging.ERROR)
        self._wake()

    @property
    def stopping(self) -> bool:
        return self._signals > 0 or self.failure is not None

    # -- the supervisor's life -------------------------------------------------------------

    def run(self) -> int:
        """Serve until stopped; the exit status (0 after a clean drain on a signal)."""
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        started: list[SupervisorExtension] = []
        reservation: socket.socket | None = None
        try:
            # Bound, never listening: it keeps the port (and resolves port 0) without being
            # handed any connection.
            try:
                reservation = reuse_port_socket(self.host, self.port)
            except OSError as exc:
                raise ConfigError(
                    f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
                ) from exc
            self.port = reservation.getsockname()[1]
            # A signal meanwhile waits for the extension being started (bounded by its own
            # timeout): interrupted, it could leave what it started half-recorded.
            started, environment = start_extensions(self._extensions, self.fail)
            os.environ.update(environment)
            for slot in range(self.workers):
                if self.stopping:  # a signal while starting: start no more
                    break
                self._spawn(slot)
            else:
                log_event(
                    "supervisor.started",
                    f"supervisor {os.getpid()} started {self.workers} workers on "
                    f"{self.host}:{self.port}",
                )
            self._supervise()
        finally:
            for worker in self._running.values():
                worker.process.kill()
                worker.process.wait()
                os.close(worker.ready)
            stop_extensions(started)
            if reservation is not None:
                reservation.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_read)
            os.close(self._wake_write)
        if self.failure is not None or self._unclean:
            return 1
        log_event("supervisor.stopped", "every worker drained and exited")
        return 0

    def _spawn(self, slot: int) -> None:
        """Start a worker (from the main thread only: the kernel sends a parent-death signal
        when the thread that started the child ends, not the process)."""
        ready, told = os.pipe()
        try:
            # A plain interpreter rather than multiprocessing's spawn, which would import the
            # parent's __main__ and unpickle the target (much of aviso) before the worker's
            # first line could tie it to this process.
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    WORKER_ENTRY,
                    self.host,
                    str(self.port),
                    str(self.workers),
                    str(os.getpid()),
                    str(told),
                ],
                pass_fds=(told,),
                # Out of the supervisor's process group from the start: a Ctrl-C in a
                # terminal reaches the supervisor alone, which forwards one SIGTERM (a
                # second signal would cut the drain short).
                process_group=0,
            )
        except BaseException:
            os.close(ready)
            raise
        finally:
            os.close(told)
        os.set_blocking(ready, False)
        self._running[slot] = _Worker(process, ready)
        log_event("worker.started", f"worker {process.pid} started", pid=process.pid)
        for extension in self._extensions:
            extension.worker_started(process.pid)

    def _supervise(self) -> None:
        while self._running:
            self._forward_signals()
            self._kill_when_overdue()
            waiting = [self._wake_read, *(worker.ready for worker in self._running.values())]
            timeout = None if self._deadline is None else self._deadline - time.monotonic()
            wait(waiting, None if timeout is None else max(timeout, 0.0))
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_read, 512):
                    pass
            for slot, worker in list(self._running.items()):
                serving = worker.serving
                exited = worker.read()
                if worker.serving and not serving:
                    self._startup_failures = 0
                if exited:
                    self._exited(slot, worker)

    def _kill_when_overdue(self) -> None:
        if self._deadline is None or time.monotonic() < self._deadline:
            return
        self._deadline = None
        log_event(
            "supervisor.stop.overdue",
            f"killing {len(self._running)} workers still running "
            f"{STOP_DEADLINE_SECONDS:.0f} s after the stop signal",
            logging.WARNING,
        )
        for worker in self._running.values():
            worker.process.kill()

    def _forward_signals(self) -> None:
        wanted = 2 if self._signals > 1 else 1 if self.stopping else 0
        if wanted <= self._forwarded:
            return
        self._forwarded = wanted
        if wanted == 1:
            self._deadline = time.monotonic() + STOP_DEADLINE_SECONDS
        # First SIGTERM (drain), then SIGKILL for an operator who does not want to wait.
        sig = signal.SIGTERM if wanted == 1 else signal.SIGKILL
        log_event(
            "supervisor.stopping",
            f"{'draining' if wanted == 1 else 'killing'} {len(self._running)} workers",
        )
        for worker in self._running.values():
            # Not reaped before _exited, so the pid is still this worker's.
            worker.process.send_signal(sig)

    def _stopped_cleanly(self, worker: _Worker, code: int) -> bool:
        if code == 0 or self._forwarded > 1:  # drained, or killed as the operator asked
            return True
        # One that never served had nothing to drain: its SIGTERM may have come before its
        # handlers (the interpreter still starting), or the deadline killed it mid-start.
        return not worker.serving and code in (-signal.SIGTERM, -signal.SIGKILL)

    def _exited(self, slot: int, worker: _Worker) -> None:
        process = worker.process
        code = process.wait()  # its end of the pipe closed: it exited, or is about to
        os.close(worker.ready)
        del self._running[slot]
        pid = process.pid
        for extension in self._extensions:
            extension.worker_exited(pid)
        status = _status(code)
        if self.stopping:
            if not self._stopped_cleanly(worker, code):
                self._unclean = True
            log_event("worker.exited", f"worker {pid} exited with {status}")
            return
        if not worker.serving:
            self._startup_failures += 1
            log_event(
                "worker.failed", f"worker {pid} exited with {status} before serving", logging.ERROR
            )
            if self._startup_failures >= STARTUP_FAILURES:
                self.fail(
                    f"workers keep failing at startup: {STARTUP_FAILURES} in a row exited "
                    f"before serving, the last with {status} (see the log lines above)"
                )
                return
        else:
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and self._crashes[0] < now - CRASH_WINDOW:
                self._crashes.popleft()
            log_event("worker.died", f"worker {pid} exited with {status}", logging.ERROR)
            if len(self._crashes) > CRASHES_PER_WORKER * self.workers:
                self.fail(
                    f"workers keep crashing: {len(self._crashes)} exits within "
                    f"{CRASH_WINDOW:.0f} s, the last with {status}"
                )
                return
        self._spawn(slot)
        log_event("worker.replaced", f"worker {pid} replaced by {self._running[slot].process.pid}")


def lost_in_process(fail_holder: list[str]) -> Fail:
    """``fail`` for a single-process server: note the reason and stop the server as SIGTERM
    would (a graceful drain); the caller exits non-zero with the reason."""

    def fail(reason: str) -> None:
        if not fail_holder:
            fail_holder.append(reason)
            log_event("server.failed", reason, logging.ERROR)
            os.kill(os.getpid(), signal.SIGTERM)

    return fail

"""``aviso-server serve`` stopped at any moment: a stop signal while workers are being started
or are still starting, a supervisor killed outright, Ctrl-C on a single process.

Everything is real: ``aviso-server serve`` children on 127.0.0.1. A worker that is "still
starting" is made so deterministically: its broker is a socket that accepts connections
and never says a word, so the backend's first connection attempt waits ``STUCK_SECONDS``
(far longer than any bound here). Which processes are workers, and whether they are gone,
is read from the operating system (psutil). Every wait is a bounded poll.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from aviso_host.lifecycle import WORKER_ENTRY
from aviso_host.server import GRACEFUL_SHUTDOWN_SECONDS
from aviso_host.supervisor import WORKERS_PER_CPU, usable_cpus
from tests.host.backends.jetstream_support import (
    AVISO,
    aviso_serving,
    document,
    environment,
    poll,
    unique,
    watching,
    write_config,
)
from tests.support.process import ended, free_port, run_aviso

pytestmark = pytest.mark.heavy

STUCK_SECONDS = 600
"""How long a worker's first connection attempt to the silent broker would wait."""
START_TIMEOUT = 60.0
"""Every worker started and connecting (interpreters starting on a busy machine)."""
GONE_TIMEOUT = 60.0
"""Processes that should end at once have ended by then."""
MANY_WORKERS = min(16, WORKERS_PER_CPU * usable_cpus())


def signal_name(signum: signal.Signals) -> str:
    return signum.name


@contextmanager
def silent_broker() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel completes them) and never answers:
    a NATS client waits for the server's greeting until its connect timeout."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        yield sock.getsockname()[1]


def stuck_config(broker: int) -> dict[str, Any]:
    return document(
        f"nats://127.0.0.1:{broker}",
        jetstream={"retry_attempts": 1, "timeout_seconds": STUCK_SECONDS},
    )


@dataclass
class Serve:
    """An ``aviso-server serve`` child that may never become healthy."""

    process: subprocess.Popen[bytes]
    log_path: Path
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    """Every worker process looked at, killed at the end whatever the outcome."""

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def workers(self) -> list[psutil.Process]:
        """The live workers (child interpreters running the worker entry point)."""
        found = []
        with suppress(psutil.NoSuchProcess):
            for child in psutil.Process(self.process.pid).children():
                with suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                    if WORKER_ENTRY in child.cmdline():
                        found.append(child)
                        self.seen.setdefault(child.pid, child)
        return found

    def logged_workers(self) -> list[psutil.Process | None]:
        """The workers the log says were started (``None``: already gone)."""
        started = []
        for line in self.log().splitlines():
            if '"event_name":"worker.started"' in line:
                pid = json.loads(line)["pid"]
                try:
                    started.append(self.seen.setdefault(pid, psutil.Process(pid)))
                except psutil.NoSuchProcess:
                    started.append(None)
        return started


@contextmanager
def serving(directory: Path, config: dict[str, Any], *args: str) -> Iterator[Serve]:
    path = write_config(directory, config)
    log_path = directory / f"serve-{unique('log')}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*AVISO, "serve", "--config", str(path), "--port", str(free_port()), *args],
            env=environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    serve = Serve(process, log_path)
    try:
        yield serve
    finally:
        process.kill()
        process.wait(GONE_TIMEOUT)
        for worker in serve.seen.values():
            with suppress(psutil.NoSuchProcess):
                worker.kill()


def connecting_to(process: psutil.Process, port: int) -> bool:
    with suppress(psutil.NoSuchProcess):
        return any(
            connection.raddr and connection.raddr.port == port
            for connection in process.net_connections(kind="tcp")
        )
    return False


def all_connecting(serve: Serve, count: int, broker: int) -> list[psutil.Process] | None:
    """The ``count`` workers, once each is waiting for the silent broker's greeting."""
    workers = serve.workers()
    if len(workers) == count and all(connecting_to(w, broker) for w in workers):
        return workers
    return None


def first_worker_started(serve: Serve) -> bool:
    return bool(serve.logged_workers())


def assert_stopped_cleanly(serve: Serve) -> None:
    """Exited 0 within the graceful shutdown, every worker it started gone, nothing that
    reads as a failure in its output."""
    try:
        status = serve.process.wait(GRACEFUL_SHUTDOWN_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {GRACEFUL_SHUTDOWN_SECONDS} s after the signal\n{serve.log()}")
    output = serve.log()
    assert status == 0, output
    for worker in serve.logged_workers():
        assert ended(worker), f"worker {worker} outlived its supervisor\n{output}"
    for failure in ("Traceback", "Aborted!", "Error:", '"level":"error"'):
        assert failure not in output, output


# -- a stop signal while starting -----------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=signal_name)
def test_a_signal_while_workers_are_being_spawned_stops_them_and_exits_0(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The signal comes as the first worker is started: no further worker is started, those
    started (most still a starting interpreter) are stopped, and the exit status is 0."""
    with (
        silent_broker() as broker,
        serving(tmp_path, stuck_config(broker), "--workers", str(MANY_WORKERS)) as serve,
    ):
        poll(lambda: first_worker_started(serve), START_TIMEOUT, "a worker started", step=0.01)
        serve.process.send_signal(signum)
        assert_stopped_cleanly(serve)
    assert len(serve.logged_workers()) <= MANY_WORKERS


def test_a_signal_while_every_worker_still_starts_stops_them_and_exits_0(tmp_path: Path) -> None:
    """Every worker is inside its start-up (waiting for its broker): the signal ends the
    start-up rather than waiting for it."""
    with (
        silent_broker() as broker,
        serving(tmp_path, stuck_config(broker), "--workers", "2") as serve,
    ):
        poll(lambda: all_connecting(serve, 2, broker), START_TIMEOUT, "both workers connecting")
        serve.process.send_signal(signal.SIGTERM)
        assert_stopped_cleanly(serve)
    assert "supervisor.stopped" in serve.log()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=signal_name)
def test_a_single_process_signalled_while_it_starts_exits_0(
    tmp_path: Path, signum: signal.Signals
) -> None:
    with silent_broker() as broker, serving(tmp_path, stuck_config(broker)) as serve:
        poll(
            lambda: connecting_to(psutil.Process(serve.process.pid), broker),
            START_TIMEOUT,
            "the server connecting",
        )
        serve.process.send_signal(signum)
        assert_stopped_cleanly(serve)


# -- a supervisor killed outright -----------------------------------------------------------


@pytest.mark.parametrize("moment", ["spawning", "starting"])
def test_workers_end_with_a_supervisor_killed_outright(tmp_path: Path, moment: str) -> None:
    """SIGKILL, which the supervisor cannot act on: each worker ends on its own, whether it
    was a fresh interpreter (``spawning``: killed as the first worker is started) or deep
    in its start-up (``starting``: waiting for its broker)."""
    count = MANY_WORKERS if moment == "spawning" else 4
    with (
        silent_broker() as broker,
        serving(tmp_path, stuck_config(broker), "--workers", str(count)) as serve,
    ):
        if moment == "spawning":
            poll(lambda: first_worker_started(serve), START_TIMEOUT, "a worker started", 0.01)
        else:
            poll(lambda: all_connecting(serve, count, broker), START_TIMEOUT, "workers connecting")
        serve.workers()  # noted before the supervisor goes: its children are adopted then
        serve.process.kill()
        serve.process.wait(GONE_TIMEOUT)
        workers = [*serve.logged_workers(), *serve.seen.values()]
        assert workers
        poll(lambda: all(ended(w) for w in workers), GONE_TIMEOUT, "every worker gone")


# -- the number of workers --------------------------------------------------------------------


def test_more_than_8_workers_per_cpu_are_refused_however_asked(tmp_path: Path) -> None:
    """The option, the variable and the key all go through ``application.workers``."""
    too_many = WORKERS_PER_CPU * usable_cpus() + 1
    config = document(None)
    plain = write_config(tmp_path, config)
    config["application"]["workers"] = too_many
    keyed = write_config(tmp_path, config)
    variable = {"AVISOSERVER_APPLICATION__WORKERS": str(too_many)}
    results = {
        "option": run_aviso("serve", "--config", str(plain), "--workers", str(too_many)),
        "variable": run_aviso("serve", "--config", str(plain), env=variable),
        "key": run_aviso("serve", "--config", str(keyed)),
    }
    for how, result in results.items():
        output = result.stdout + result.stderr
        assert result.returncode == 1, (how, output)
        (line,) = [line for line in output.splitlines() if line.strip()]
        assert line.startswith(f"Error: application.workers: {too_many} workers is more than"), (
            how,
            output,
        )


# -- one process: Ctrl-C and SIGTERM end alike -------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=signal_name)
def test_a_single_process_drains_and_exits_0_on_ctrl_c_and_sigterm(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """As under ``--workers``: the open watch ends with ``server_shutdown``, the exit status
    is 0, and click's ``Aborted!`` never shows."""
    event_type = unique("ctrlc")
    with aviso_serving(tmp_path, document(None, kind="in_memory")) as server:
        with server.client() as client, watching(client, event_type, {"n": "*"}) as watch:
            server.process.send_signal(signum)
            closing = watch.until(lambda event: event.name == "connection-closing")
            assert closing.data["reason"] == "server_shutdown", closing.data
        try:
            status = server.process.wait(GRACEFUL_SHUTDOWN_SECONDS)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running after the signal\n{server.log()}")
        output = server.log()
    assert status == 0, output
    assert "Aborted!" not in output and "Traceback" not in output, output

"""``aviso-server serve --workers N``: one supervising process, N workers sharing the port.

Everything is real: ``aviso-server serve`` children on 127.0.0.1, their private nats-server
(``--embedded-nats``), httpx clients. Which worker holds a connection is read from the
operating system (``psutil``: the worker process owning the established socket), so the
wire carries nothing that says which process answered. Every wait is a bounded poll.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from aviso_builtins.backends.jetstream.embedded import RESTART_ATTEMPTS
from aviso_host.config import ConfigError, load_settings, loader
from aviso_host.config.settings import LimitSettings
from aviso_host.lifecycle import WORKER_ENTRY
from aviso_host.plugins import discover
from aviso_host.server import connection_capacity
from aviso_host.supervisor import refuse_process_local_backend, worker_count
from tests.host.backends.jetstream_support import (
    STOP_TIMEOUT,
    Aviso,
    Case,
    Watch,
    aviso_serving,
    document,
    notify,
    notify_ok,
    poll,
    replay,
    serve_refusals,
    unique,
    watching,
)

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[2]

WORKERS = 2
WATCHES = 20
START_TIMEOUT = 60.0
"""Both workers listening and ready (each starts a Python interpreter on a busy machine)."""
EVERYTHING = {"n": "*"}


def workers_of(server: Aviso) -> list[psutil.Process]:
    """The supervisor's worker processes."""
    children = psutil.Process(server.process.pid).children()
    return [
        child
        for child in children
        if WORKER_ENTRY in _cmdline(child) and child.status() != psutil.STATUS_ZOMBIE
    ]


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def nats_children(server: Aviso) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(server.process.pid).children():
        try:
            if child.name() == "nats-server" and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:  # gone between the listing and the look
            pass
    return found


def connections_on(worker: psutil.Process, port: int, status: str) -> int:
    try:
        return sum(
            1
            for connection in worker.net_connections(kind="tcp")
            if connection.laddr and connection.laddr.port == port and connection.status == status
        )
    except psutil.NoSuchProcess:
        return 0


def serving_processes(server: Aviso, workers: int) -> list[psutil.Process]:
    """The processes that serve HTTP: the workers, or the server itself with one."""
    if workers == 1:
        return [psutil.Process(server.process.pid)]
    return workers_of(server)


def all_listening(server: Aviso, workers: int = WORKERS) -> list[psutil.Process] | None:
    """The serving processes, once ``workers`` of them listen on the service's port."""
    processes = serving_processes(server, workers)
    if len(processes) != workers:
        return None
    if all(connections_on(process, server.port, psutil.CONN_LISTEN) for process in processes):
        return processes
    return None


def ready(server: Aviso) -> bool:
    try:
        return httpx.get(f"{server.url}/ready", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def embedded(tmp_path: Path, workers: int = WORKERS) -> Iterator[Aviso]:
    """``serve --workers N --embedded-nats``, yielded once every worker listens and /ready."""
    content = document(None)
    with aviso_serving(
        tmp_path, content, "--workers", str(workers), "--embedded-nats", str(tmp_path / "store")
    ) as server:
        poll(lambda: all_listening(server, workers), START_TIMEOUT, "every worker listening")
        poll(lambda: ready(server), START_TIMEOUT, "/ready")
        yield server


def open_watches(stack: ExitStack, server: Aviso, event_type: str, count: int) -> list[Watch]:
    """``count`` watches, each on a connection of its own."""
    watches = []
    for _ in range(count):
        client = stack.enter_context(server.client())
        watches.append(stack.enter_context(watching(client, event_type, EVERYTHING)))
    return watches


def test_watches_spread_over_workers_all_see_one_notify_and_sigterm_drains_them(
    tmp_path: Path,
) -> None:
    event_type = unique("spread")
    with embedded(tmp_path) as server, ExitStack() as stack:
        watches = open_watches(stack, server, event_type, WATCHES)
        held = [
            connections_on(worker, server.port, psutil.CONN_ESTABLISHED)
            for worker in workers_of(server)
        ]
        assert sum(held) == WATCHES, held
        assert all(held), f"one worker holds every watch: {held}"

        with server.client() as http:
            notify_ok(http, event_type, {"n": 1}, {"one": "notify"})
        for watch in watches:
            (received,) = watch.collect(1)
            assert received["data"]["payload"] == {"one": "notify"}, received

        server.process.terminate()
        for watch in watches:
            closing = watch.until(lambda event: event.name == "connection-closing")
            assert closing.data["reason"] == "server_shutdown", closing.data
        assert server.process.wait(STOP_TIMEOUT + 30) == 0, server.log()
    assert '"event_name":"supervisor.stopped"' in server.log()


def test_a_killed_worker_is_replaced_and_the_service_keeps_answering(tmp_path: Path) -> None:
    event_type = unique("killed")
    with embedded(tmp_path) as server:
        victim, survivor = workers_of(server)
        victim.kill()
        victim.wait(10)  # gone (its listening socket with it) once the supervisor reaped it
        with server.client() as http:
            # The survivor answers while the replacement starts (new connections each time).
            for n in range(5):
                with httpx.Client(base_url=server.url, timeout=15.0) as fresh:
                    notify_ok(fresh, event_type, {"n": n})
            replacement = poll(
                lambda: next(
                    (w for w in all_listening(server) or () if w.pid != survivor.pid), None
                ),
                START_TIMEOUT,
                "a replacement worker",
            )
            assert replacement.pid != victim.pid
            assert poll(lambda: not victim.is_running(), 10, "the killed worker reaped")
            assert len(replay(http, event_type, EVERYTHING)) == 5
        assert f"worker {victim.pid} replaced by {replacement.pid}" in server.log()


@pytest.mark.parametrize("workers", [1, WORKERS])
def test_embedded_nats_killed_during_notifies_is_restarted_and_nothing_acknowledged_is_lost(
    tmp_path: Path, workers: int
) -> None:
    event_type = unique("natsdown")
    acknowledged: list[int] = []
    numbers = iter(range(1_000_000))
    lock = threading.Lock()
    stop = threading.Event()

    with embedded(tmp_path, workers) as server:
        (nats,) = nats_children(server)
        command = nats.cmdline()
        producers = [
            threading.Thread(
                target=_producer,
                args=(server.url, event_type, numbers, lock, stop, acknowledged),
            )
            for _ in range(4)
        ]
        for thread in producers:
            thread.start()
        try:
            poll(lambda: len(acknowledged) >= 20, 30, "notifications acknowledged before the kill")
            nats.kill()
            poll(lambda: not ready(server), 20, "/ready answering 503", step=0.02)
            with httpx.Client(timeout=30.0) as probe:
                assert probe.get(f"{server.url}/health").status_code == 200
            restarted = poll(
                lambda: next((n for n in nats_children(server) if n.pid != nats.pid), None),
                30,
                "a restarted nats-server",
            )
            # Same port, same store. Polled: a launcher script (a pyenv shim) shows its own
            # command line until it execs the binary.
            poll(lambda: restarted.cmdline() == command, 30, "the restarted server's command")
            poll(lambda: all(ready(server) for _ in range(10)), 60, "/ready 200 again")
            count = len(acknowledged)
            poll(lambda: len(acknowledged) >= count + 20, 30, "notifications after the restart")
        finally:
            stop.set()
            for thread in producers:
                thread.join(30)
        assert poll(lambda: not nats.is_running(), 10, "the killed nats-server reaped")
        with server.client() as http:
            events = replay(http, event_type, EVERYTHING)
        stored = {str(event["data"]["identifier"]["n"]) for event in events}
        lost = sorted(set(map(str, acknowledged)) - stored)
        assert not lost, f"{len(lost)} acknowledged notifications lost: {lost[:20]}"
        assert "embedded nats-server exited with signal SIGKILL" in server.log()


@pytest.mark.parametrize("workers", [1, WORKERS])
def test_embedded_nats_that_cannot_be_restarted_stops_the_service(
    tmp_path: Path, workers: int
) -> None:
    """Its port taken while it is down, every restart fails: the service drains and exits
    non-zero, its last line naming the cause."""
    with embedded(tmp_path, workers) as server:
        (nats,) = nats_children(server)
        command = nats.cmdline()
        port = int(command[command.index("--port") + 1])
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            nats.kill()
            poll(lambda: _bound(squatter, port), 10, "the nats-server's port free", step=0.005)
            squatter.listen()
            status = server.process.wait(120)
    assert status != 0, server.log()
    last = server.log().strip().splitlines()[-1]
    assert last.startswith("Error: embedded nats-server exited with signal SIGKILL"), last
    assert "5 restarts failed" in last, last


def test_embedded_nats_that_dies_after_each_restart_says_so_when_the_service_gives_up(
    tmp_path: Path,
) -> None:
    """Every restart works and the server dies again soon after: the last line says how
    often it exited and in how long, not that restarts failed."""
    killed: set[int] = set()
    with embedded(tmp_path, 1) as server:
        for _ in range(RESTART_ATTEMPTS + 1):
            (nats,) = poll(
                lambda: [n for n in nats_children(server) if n.pid not in killed],
                60,
                "a restarted nats-server",
            )
            poll(lambda: ready(server), 60, "/ready 200 on the restarted server")
            killed.add(nats.pid)
            nats.kill()
        status = server.process.wait(120)
    assert status != 0, server.log()
    last = server.log().strip().splitlines()[-1]
    assert last.startswith(
        "Error: embedded nats-server exited with signal SIGKILL; "
        f"it exited {RESTART_ATTEMPTS + 1} times within "
    ), last
    assert "giving up" in last and "restarts failed" not in last, last


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def test_max_connections_is_shared_between_workers() -> None:
    """``limits.max_connections`` is for the service: each of N workers takes its share."""
    limits = LimitSettings(max_connections=10)
    assert connection_capacity(limits) == 10
    assert connection_capacity(limits, 2) == 5
    assert connection_capacity(limits, 3) == 4
    assert connection_capacity(LimitSettings(max_connections=1), 4) == 1


def test_workers_auto_is_one_per_usable_core() -> None:
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    assert worker_count(3) == 3


def _producer(
    url: str,
    event_type: str,
    numbers: Iterator[int],
    lock: threading.Lock,
    stop: threading.Event,
    acknowledged: list[int],
) -> None:
    with httpx.Client(base_url=url, timeout=15.0) as client:
        while not stop.is_set():
            with lock:
                n = next(numbers)
            try:
                response = notify(client, event_type, {"n": n})
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                with lock:
                    acknowledged.append(n)


def test_refusals(tmp_path: Path) -> None:
    """In-memory with two workers is refused before anything starts; workers that cannot
    start (NATS unreachable) make the supervisor give up."""
    in_memory: dict[str, Any] = document(None, kind="in_memory")
    unreachable = document(
        "nats://127.0.0.1:9", jetstream={"retry_attempts": 1, "timeout_seconds": 1}
    )
    two = {"AVISOSERVER_APPLICATION__WORKERS": "2"}
    refusals = serve_refusals(
        tmp_path,
        {
            "in_memory": Case(in_memory, two),
            "unreachable": Case(unreachable, two, timeout=120.0),
        },
    )
    refused = refusals["in_memory"]
    refused.assert_refused("Error: application.workers: 2 workers, but the 'in_memory' backend")
    assert refused.output.count("Error:") == 1, refused.output
    crashing = refusals["unreachable"]
    crashing.assert_refused("Error: workers keep failing at startup: 3 in a row exited")
    assert crashing.output.strip().splitlines()[-1].startswith("Error: "), crashing.output


@pytest.mark.parametrize("workers", [1, WORKERS])
def test_a_terminal_ctrl_c_reaches_aviso_not_its_embedded_nats_server(
    tmp_path: Path, workers: int
) -> None:
    """A terminal sends SIGINT to its whole foreground process group: the nats-server must be
    outside it, or it exits under the draining workers and is "restarted" at error level."""
    with embedded(tmp_path, workers) as server:
        (nats,) = nats_children(server)
        assert os.getpgid(nats.pid) != os.getpgid(server.process.pid)
        server.process.send_signal(signal.SIGINT)
        assert server.process.wait(STOP_TIMEOUT + 30) == 0, server.log()
        assert not nats.is_running() or nats.status() == psutil.STATUS_ZOMBIE
    assert "embedded nats-server exited" not in server.log()
    assert '"level":"error"' not in server.log()


def test_workers_auto_refused_on_in_memory_says_what_auto_became(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``auto`` is a number only on the machine at hand: the refusal says which."""
    monkeypatch.setattr(loader, "SYSTEM_CONFIG", tmp_path / "absent.yaml")
    registry = discover()
    environ = {"AVISOSERVER_APPLICATION__WORKERS": "auto"}
    settings = load_settings(registry, environ=environ, cwd=ROOT, home=tmp_path)
    assert settings.backend.kind == "in_memory"
    refuse_process_local_backend(settings, registry, 1)  # one core: auto is one worker
    with pytest.raises(ConfigError, match=r"^application\.workers: auto \(4 workers on this"):
        refuse_process_local_backend(settings, registry, 4)

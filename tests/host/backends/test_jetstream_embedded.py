"""Zero-setup durable mode: ``aviso-server serve`` runs its own nats-server child with its files in
a directory: ``notification_backend.jetstream.embedded_store_dir`` or
``aviso-server serve --embedded-nats DIR``.

History survives a full restart of aviso (which restarts its private nats-server on the same
directory), and the child is gone once aviso has exited, whether it was stopped (SIGTERM) or
killed (SIGKILL).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from tests.host.backends.jetstream_support import (
    Aviso,
    aviso_serving,
    document,
    ids,
    notify_ok,
    replay,
    unique,
    write_config,
)

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

GONE_TIMEOUT = 20.0
EVERYTHING = {"n": "*"}


def _nats_children(server: Aviso) -> list[psutil.Process]:
    children = psutil.Process(server.process.pid).children(recursive=True)
    return [child for child in children if child.name() == "nats-server"]


def _port_of(child: psutil.Process) -> int:
    command = child.cmdline()
    return int(command[command.index("--port") + 1])


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _gone(child: psutil.Process) -> bool:
    try:
        return child.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@contextmanager
def reaped(children: list[psutil.Process]) -> Iterator[list[psutil.Process]]:
    """Teardown safety net: no nats-server started by aviso outlives the test."""
    try:
        yield children
    finally:
        for child in children:
            try:
                if child.is_running():
                    child.kill()
            except psutil.NoSuchProcess:
                pass


def _wait_gone(child: psutil.Process, port: int) -> None:
    deadline = time.monotonic() + GONE_TIMEOUT
    while not (_gone(child) and not _listening(port)):
        assert time.monotonic() < deadline, f"nats-server {child.pid} outlived aviso"
        time.sleep(0.05)


def _run_once(
    workdir: Path,
    config: Path,
    store: Path,
    args: tuple[str, ...],
    event_type: str,
    tracked: list[psutil.Process],
    kill: bool = False,
) -> list[str]:
    """Start aviso, check its private nats-server, store one more notification, stop or
    kill aviso, check the child is gone; return the replayed ids seen before stopping."""
    with aviso_serving(workdir, config, *args) as server:
        children = _nats_children(server)
        tracked.extend(children)
        assert len(children) == 1, children
        child = children[0]
        command = child.cmdline()
        assert command[command.index("--store_dir") + 1] == str(store)
        port = _port_of(child)
        assert '"backend":"jetstream"' in server.log()
        with server.client() as http:
            before = len(replay(http, event_type, EVERYTHING))
            notify_ok(http, event_type, {"n": before}, {"n": before})
            seen = ids(replay(http, event_type, EVERYTHING))
        if kill:
            server.kill()
        else:
            server.stop()
    _wait_gone(child, port)
    return seen


def test_embedded_store_dir_key_keeps_history_across_stop_and_kill_9(tmp_path: Path) -> None:
    """Stopped (SIGTERM), then killed (SIGKILL: the child must still go, it gets SIGTERM
    when its parent dies), then started a third time: all history is there."""
    store = tmp_path / "store"
    config = write_config(tmp_path, document(None, jetstream={"embedded_store_dir": str(store)}))
    event_type = unique("emb")
    with reaped([]) as tracked:
        first = _run_once(tmp_path, config, store, (), event_type, tracked)
        second = _run_once(tmp_path, config, store, (), event_type, tracked, kill=True)
        third = _run_once(tmp_path, config, store, (), event_type, tracked)
    assert first == [f"{event_type}@1"]
    assert second == [f"{event_type}@1", f"{event_type}@2"]
    assert third == [f"{event_type}@{n}" for n in (1, 2, 3)]
    assert (store / "jetstream").is_dir()


def test_embedded_nats_cli_flag_keeps_history_across_restarts(tmp_path: Path) -> None:
    """``--embedded-nats DIR`` over an in-memory configuration switches to JetStream."""
    store = tmp_path / "store"
    content = document(None)
    content["notification_backend"] = {"kind": "in_memory"}
    config = write_config(tmp_path, content)
    args = ("--embedded-nats", str(store))
    event_type = unique("flag")
    with reaped([]) as tracked:
        first = _run_once(tmp_path, config, store, args, event_type, tracked)
        second = _run_once(tmp_path, config, store, args, event_type, tracked)
    assert first == [f"{event_type}@1"]
    assert second == [f"{event_type}@1", f"{event_type}@2"]

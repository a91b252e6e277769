"""A real ``nats-server -js`` on a free loopback port with its own store directory."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aviso_builtins.backends.jetstream.embedded import nats_server_command
from tests.support.process import free_port

READY_TIMEOUT = 20.0


class NatsServer:
    """Start/stop can be repeated on the same port and store (restart and outage tests)."""

    def __init__(self, store_dir: Path, token: str | None = None) -> None:
        self.store_dir = store_dir
        self.token = token
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = nats_server_command(self.store_dir, self.port, self.token)
        # The child keeps its own descriptor; closing ours avoids a ResourceWarning (an error
        # under this suite's filterwarnings).
        with (self.store_dir / "nats-server.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start listening")

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(30)


@contextmanager
def nats_server(store_dir: Path, token: str | None = None) -> Iterator[NatsServer]:
    store_dir.mkdir(parents=True, exist_ok=True)
    server = NatsServer(store_dir, token)
    server.start()
    try:
        yield server
    finally:
        server.stop()

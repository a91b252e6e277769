"""Run the real ``aviso-server`` CLI in a sealed environment and talk to it over HTTP.

Configuration tests must see exactly the sources they create: every process runs with a
temporary working directory (for ``./configuration/config.yaml``), a temporary ``HOME``
(for ``$HOME/.aviso_server/config.yaml``) and a copy of ``os.environ`` without any
inherited ``AVISOSERVER_*`` variable. Servers are ``aviso-server serve`` subprocesses on free
loopback ports; readiness is a bounded ``GET /health`` poll, and every process is stopped
(SIGTERM, then SIGKILL) before the test ends.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from textwrap import dedent
from typing import Any

import httpx
import pytest

from tests.support.process import aviso_command, stop
from tests.support.sse import Event, collect

SYSTEM_CONFIG = Path("/etc/aviso_server/config.yaml")
ENV_PREFIX = "AVISOSERVER_"

START_TIMEOUT = 60.0  # seconds until /health must answer (a loaded machine is slow)
POLL_STEP = 0.05
EXIT_TIMEOUT = 60.0  # seconds a misconfigured server gets to exit
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
CLI_TIMEOUT = 60.0
HTTP_TIMEOUT = httpx.Timeout(10.0)

no_system_config = pytest.mark.skipif(
    SYSTEM_CONFIG.exists(),
    reason=f"{SYSTEM_CONFIG} exists on this machine: the default cascade would read it",
)
"""For tests that rely on the default file cascade (no ``AVISOSERVER_CONFIG_FILE``)."""


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def nothing_listens(port: int) -> bool:
    """True when a TCP connect to 127.0.0.1:port is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def config_text(
    port: int | str,
    extra: str = "",
    *,
    backend: str = "{kind: in_memory}",
    application: str = "",
) -> str:
    """A minimal valid YAML configuration plus ``extra`` top-level sections.

    ``backend`` is the flow mapping of ``notification_backend``; ``application`` adds
    flow-mapping entries to ``application`` (e.g. ``"base_url: 'http://x'"``).
    """
    app = f"host: 127.0.0.1, port: {port}" + (f", {application}" if application else "")
    head = f"application: {{{app}}}\nnotification_backend: {backend}\n"
    return head + dedent(extra).strip("\n") + "\n"


@dataclass
class Failure:
    """The outcome of a process that was expected to refuse to start."""

    returncode: int
    stderr: str

    def names(self, *fragments: str) -> None:
        """Assert a non-zero exit and that the error output mentions every fragment."""
        assert self.returncode != 0, f"exit status 0\n{self.stderr}"
        for fragment in fragments:
            assert fragment in self.stderr, f"{fragment!r} not in stderr:\n{self.stderr}"


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    stderr_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=HTTP_TIMEOUT)

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def log_records(self) -> list[dict[str, Any]]:
        """The structured (one JSON object per line) log records written so far."""
        records = []
        for line in self.stderr().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/health").status_code == 200
    except httpx.TransportError:
        return False


class Sandbox:
    """A temporary working directory and HOME, and the processes started in them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cwd = root / "cwd"
        self.home = root / "home"
        self.cwd.mkdir()
        self.home.mkdir()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._runs = 0

    # -- configuration sources -------------------------------------------------------

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def default_file(self, text: str) -> Path:
        """``./configuration/config.yaml`` relative to the server's working directory."""
        return self.write("cwd/configuration/config.yaml", text)

    def home_file(self, text: str) -> Path:
        """``$HOME/.aviso_server/config.yaml``."""
        return self.write("home/.aviso_server/config.yaml", text)

    def environ(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """``os.environ`` without inherited ``AVISOSERVER_*`` variables, HOME moved, plus env."""
        result = {
            name: value
            for name, value in os.environ.items()
            if name[: len(ENV_PREFIX)].upper() != ENV_PREFIX and name != "NATS_TOKEN"
        }
        result["HOME"] = str(self.home)
        result.update(env or {})
        return result

    # -- processes -------------------------------------------------------------------

    def _spawn(
        self, args: tuple[str, ...], env: Mapping[str, str] | None, cwd: Path | None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        self._runs += 1
        logs = self.root / f"run{self._runs}"
        logs.mkdir()
        stderr_path = logs / "stderr.log"
        with open(logs / "stdout.log", "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(
                aviso_command(*args),
                cwd=cwd or self.cwd,
                env=self.environ(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self._processes.append(process)
        return process, stderr_path

    @contextmanager
    def serve(
        self,
        *args: str,
        port: int,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        host: str = "127.0.0.1",
    ) -> Iterator[ServerProcess]:
        """Run ``aviso-server serve ARGS``; yield once ``GET /health`` on host:port answers 200."""
        process, stderr_path = self._spawn(("serve", *args), env, cwd)
        server = ServerProcess(process, host, port, stderr_path)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            with httpx.Client(timeout=1.0) as client:
                while not _healthy(client, server.url):
                    if process.poll() is not None:
                        pytest.fail(
                            f"aviso-server serve exited with status {process.returncode} before "
                            f"{server.url}/health answered:\n{server.stderr()}"
                        )
                    if time.monotonic() > deadline:
                        pytest.fail(f"{server.url}/health did not answer:\n{server.stderr()}")
                    time.sleep(POLL_STEP)
            assert process.poll() is None, server.stderr()
            yield server
        finally:
            stop(process, STOP_TIMEOUT)

    def serve_fails(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        port: int | None = None,
        cwd: Path | None = None,
    ) -> Failure:
        """Run ``aviso-server serve ARGS`` expecting it to exit; fail fast if it starts serving.

        ``port`` is where the server would listen if it (wrongly) accepted the configuration.
        """
        process, stderr_path = self._spawn(("serve", *args), env, cwd)
        started = False
        try:
            deadline = time.monotonic() + EXIT_TIMEOUT
            with httpx.Client(timeout=1.0) as client:
                while process.poll() is None and time.monotonic() < deadline:
                    if port is not None and _healthy(client, f"http://127.0.0.1:{port}"):
                        started = True
                        break
                    time.sleep(POLL_STEP)
            running = process.poll() is None
        finally:
            stop(process, STOP_TIMEOUT)
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
        if started:
            pytest.fail(f"aviso-server serve started on port {port} instead of failing:\n{stderr}")
        if running:
            pytest.fail(f"aviso-server serve did not exit within {EXIT_TIMEOUT} s:\n{stderr}")
        return Failure(process.returncode, stderr)

    def cli(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a short-lived ``aviso-server`` command (e.g. ``config check FILE``)."""
        return subprocess.run(
            aviso_command(*args),
            cwd=self.cwd,
            env=self.environ(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )

    def close(self) -> None:
        """Safety net for the fixture teardown: no process outlives its test."""
        for process in self._processes:
            stop(process, STOP_TIMEOUT)


@contextmanager
def sandbox_at(root: Path) -> Iterator[Sandbox]:
    box = Sandbox(root)
    try:
        yield box
    finally:
        box.close()


# -- HTTP helpers ----------------------------------------------------------------------


def notify(
    client: httpx.Client, event_type: str, identifier: dict[str, Any], payload: Any = None
) -> httpx.Response:
    body: dict[str, Any] = {"event_type": event_type, "identifier": identifier}
    if payload is not None:
        body["payload"] = payload
    return client.post("/api/v1/notification", content=json.dumps(body))


def notify_ok(
    client: httpx.Client, event_type: str, identifier: dict[str, Any], payload: Any = None
) -> None:
    response = notify(client, event_type, identifier, payload)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success", response.text


def replay(
    client: httpx.Client, event_type: str, identifier: dict[str, Any], from_id: str = "0"
) -> list[Event]:
    """Every event of a replay stream (it closes on its own after ``replay_completed``)."""
    body = {"event_type": event_type, "identifier": identifier, "from_id": from_id}
    return collect(client, "/api/v1/replay", body)


def cloudevents(events: list[Event]) -> list[dict[str, Any]]:
    return [event.data for event in events if event.name == "replay"]


def post_status(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST and read the body only if it is not an event stream (a 200 stream is closed)."""
    with client.stream("POST", path, content=json.dumps(body)) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        return response

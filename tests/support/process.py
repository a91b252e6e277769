"""The ``aviso-server`` CLI as a child process: ``aviso-server serve`` for tests that need
signals, RSS or a fresh process, and short commands such as ``aviso-server plugins``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

# The load runs' process handling, re-exported: the tests start and stop processes alike.
from aviso_loadtests.servers import KILL_WAIT as KILL_WAIT
from aviso_loadtests.servers import free_port as free_port
from aviso_loadtests.servers import stop as stop

START_TIMEOUT = 60.0
"""Until a child ``aviso-server`` answers ``/health``: its imports alone take seconds, many
more on a loaded machine."""
CLI_TIMEOUT = 60.0


def aviso_command(*args: str) -> list[str]:
    return [sys.executable, "-c", "from aviso_host.cli import main; main()", *args]


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``os.environ`` plus ``extra``, without inherited ``AVISOSERVER_*`` overrides (only the
    configuration a test writes counts)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("AVISOSERVER_")}
    env.update(extra or {})
    return env


def run_aviso(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A short-lived ``aviso-server`` command (``plugins``, ``config check``), output as text."""
    return subprocess.run(
        aviso_command(*args),
        env=clean_environment(env),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def wait_until_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"aviso-server serve exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("aviso-server serve did not become healthy")


@contextmanager
def aviso_process(
    config: Path, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``aviso-server serve --config`` on a free port; yields (base url, process)."""
    port = free_port()
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            aviso_command("serve", "--config", str(config), "--port", str(port)),
            stderr=stderr,
            stdout=subprocess.DEVNULL,
            env=clean_environment(env),
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_healthy(url, process)
            yield url, process
        finally:
            stop(process, 30.0)


def install_into(target: Path, package: Path) -> None:
    """``pip install`` a local package into a private folder, as a third party would."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(package),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )


def with_pythonpath(folder: Path) -> dict[str, str]:
    """Environment entries putting ``folder`` first on a child process's import path."""
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def ended(process: psutil.Process | None) -> bool:
    """Whether ``process`` (``None``: already gone when looked up) has ended; a zombie has
    (an orphan waits for whichever process adopted it to reap it)."""
    if process is None:
        return True
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True

"""A stop signal that arrives while ``aviso-server serve`` forks a child during its start-up.

Starting the embedded nats-server forks with a ``preexec_fn``, so the interpreter's fork
hooks run: logging's take its lock before the fork and release it after. A signal that
arrives during the fork is handled in the first hook after it. Raised there, the stop was
printed as "Exception ignored" and dropped: the server went on serving for good.

The moment is made deterministic with fork hooks of the child's own, registered before
aviso is imported (so they run inside aviso's and logging's): the first fork under aviso's
stop handler makes SIGTERM pending (blocked) before it, and delivers it (unblocked) as the
first thing after it. Everything else is real: ``aviso-server serve --embedded-nats`` and
its nats-server child, on 127.0.0.1.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from tests.host.backends.jetstream_support import environment
from tests.support.process import free_port

pytestmark = pytest.mark.heavy

STOP_TIMEOUT = 60.0
"""The server has stopped by then (it stops in well under a second)."""

SIGNAL_DURING_FORK = """
import os, signal

armed = [True]


def under_aviso_handler():
    return armed[0] and callable(signal.getsignal(signal.SIGTERM))


def before():
    if under_aviso_handler():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        os.kill(os.getpid(), signal.SIGTERM)


def after_in_parent():
    if under_aviso_handler():
        armed[0] = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


os.register_at_fork(before=before, after_in_parent=after_in_parent)

from aviso_host.cli import main

main()
"""


def _config(directory: Path) -> Path:
    path = directory / "aviso.yaml"
    document = {
        "application": {
            "host": "127.0.0.1",
            "port": free_port(),
            "base_url": "http://127.0.0.1",
        },
        "logging": {"level": "info"},
        "notification_backend": {"kind": "in_memory"},
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _nats_servers_of(store: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if str(store) in (process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_stop_signal_during_a_fork_in_start_up_stops_the_server(tmp_path: Path) -> None:
    store = tmp_path / "nats"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SIGNAL_DURING_FORK,
            "serve",
            "--config",
            str(_config(tmp_path)),
            "--embedded-nats",
            str(store),
        ],
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, errors = process.communicate(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        _, errors = process.communicate()
        raise AssertionError(f"SIGTERM during a fork was lost: {errors.decode()[-2000:]}") from None
    finally:
        leftovers = _nats_servers_of(store)
        for leftover in leftovers:
            leftover.kill()
    assert process.returncode == 0, errors.decode()[-2000:]
    assert b"Exception ignored" not in errors, errors.decode()[-2000:]
    assert not leftovers, "the embedded nats-server outlived the server"


FORKED_CHILD = """
import os, signal, time
from aviso_host.lifecycle import Stopped, stop_on_signals

with stop_on_signals():
    pid = os.fork()
    if pid == 0:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
            os._exit(3)
        except Stopped:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_still_stops_on_a_signal() -> None:
    """The fork in progress that holds a stop back ends in the child as well: a child forked
    under the stop handler is not left holding every signal back."""
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=STOP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0", done.stdout

"""What bounds a supervisor's workers without starting a service: how many it may start,
what a dead worker leaves in the metrics directory, and a worker's tie to its parent.

Child processes here are plain interpreters (the real metrics code writing its real files,
the real start of a worker's first code), not ``aviso-server`` services.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import psutil
import pytest

from aviso_host.config import ConfigError
from aviso_host.config.settings import MetricsSettings
from aviso_host.lifecycle import WORKER_ENTRY
from aviso_host.supervisor import WORKERS_PER_CPU, usable_cpus, worker_count
from aviso_host.worker_metrics import MULTIPROCESS_DIRECTORY_VARIABLE, WorkerMetrics
from tests.host.backends.jetstream_support import poll
from tests.support.process import ended, free_port

CHILD_TIMEOUT = 60.0
CRASHES = 5
OPEN_STREAMS = "aviso_sse_connections_active"


def test_workers_are_bounded_at_8_per_usable_cpu() -> None:
    cpus = usable_cpus()
    assert worker_count(WORKERS_PER_CPU * cpus) == WORKERS_PER_CPU * cpus
    assert worker_count("auto") == cpus
    with pytest.raises(ConfigError) as refused:
        worker_count(WORKERS_PER_CPU * cpus + 1)
    message = str(refused.value)
    assert message.startswith(f"application.workers: {WORKERS_PER_CPU * cpus + 1} workers")
    assert "\n" not in message


def _recording_worker(directory: Path) -> int:
    """A process that builds aviso's metrics in the multiprocess ``directory``, as a worker
    does, records a notify and an open stream, then exits (as a crashing worker would, its
    stream never closed); its pid."""
    code = textwrap.dedent(
        """
        from aviso_host.metrics import Metrics
        metrics = Metrics(version="test", backend="in_memory", event_types=["flood"])
        metrics.sse_active.labels("/api/v1/watch", "flood").inc()
        metrics.http_in_flight.labels("POST").inc()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, MULTIPROCESS_DIRECTORY_VARIABLE: str(directory)},
    )
    assert child.wait(CHILD_TIMEOUT) == 0
    return child.pid


def _files_of(directory: Path, pid: int) -> set[str]:
    return {path.name.rsplit("_", 1)[0] for path in directory.glob(f"*_{pid}.db")}


def test_dead_workers_leave_no_live_gauge_files_however_many_crashed() -> None:
    """Each dead worker's live gauges (open streams, requests in flight, build info) go with
    it, through prometheus-client's ``mark_process_dead``: a crash loop adds no file a scrape
    reads for a gauge. Its counters stay, so sums never go backwards."""
    metrics = WorkerMetrics(MetricsSettings(enabled=True, host="127.0.0.1", port=free_port()))
    metrics.start(lambda reason: pytest.fail(reason))
    try:
        assert metrics.directory is not None
        directory = Path(metrics.directory)
        dead = []
        for _ in range(CRASHES):
            pid = _recording_worker(directory)
            assert {"gauge_livesum", "gauge_livemax"} <= _files_of(directory, pid)
            metrics.worker_started(pid)
            metrics.worker_exited(pid)
            dead.append(pid)
        for pid in dead:
            assert not any(kind.startswith("gauge_live") for kind in _files_of(directory, pid))
            assert "counter" in _files_of(directory, pid)
        scrape = httpx.get(f"http://127.0.0.1:{metrics.settings.port}/metrics", timeout=10.0)
        assert scrape.status_code == 200
        open_streams = [
            line for line in scrape.text.splitlines() if line.startswith(OPEN_STREAMS + "{")
        ]
        assert not [line for line in open_streams if '"flood"' in line], open_streams
    finally:
        metrics.stop()


def test_a_worker_whose_supervisor_is_already_gone_exits_before_importing_aviso() -> None:
    """Its supervisor's pid is not its parent's (the supervisor died and the worker was
    adopted before it armed the parent-death signal): it exits at its first line, before
    the app is imported or anything is bound."""
    supervisor = subprocess.Popen([sys.executable, "-c", "pass"])
    supervisor.wait(CHILD_TIMEOUT)  # ended and reaped
    read, write = os.pipe()
    try:
        worker = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-c",
                WORKER_ENTRY,
                "127.0.0.1",
                "0",
                "2",
                str(supervisor.pid),
                str(write),
            ],
            pass_fds=(write,),
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
    finally:
        os.close(write)
        os.close(read)
    assert worker.returncode == 1, worker.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in worker.stderr.splitlines()}
    assert "aviso_host.lifecycle" in imported
    assert "aviso_host.worker" not in imported and "uvicorn" not in imported


def test_a_process_tied_to_its_parent_ends_when_the_parent_is_killed_outright() -> None:
    """SIGKILL gives the parent no chance to act: the kernel's parent-death signal ends the
    child (a worker gets SIGTERM, its graceful drain)."""
    parent_code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", {_TIED_CHILD!r}], stdout=sys.stdout)
        time.sleep({CHILD_TIMEOUT})
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    try:
        armed = parent.stdout.readline().split()
        assert armed[:1] == [b"armed"], armed
        child = psutil.Process(int(armed[1]))
        parent.kill()
        parent.wait(CHILD_TIMEOUT)
        poll(lambda: ended(child), CHILD_TIMEOUT, "the child to end")
    finally:
        parent.kill()
        parent.wait(CHILD_TIMEOUT)
        parent.stdout.close()


_TIED_CHILD = (
    "import os, time\n"
    "from aviso_host.lifecycle import die_with_parent\n"
    "die_with_parent(os.getppid())\n"
    "print('armed', os.getpid(), flush=True)\n"
    "time.sleep(600)\n"
)

"""How an aviso process stops on a signal, and the first code a worker process runs.

Nothing of aviso's is imported at module level: a worker runs :func:`worker_entry` before
anything else, so that it is tied to its supervisor from its first instant. Importing the
app takes a fraction of a second alone and many seconds when a hundred workers start on a
busy machine; a supervisor killed meanwhile must not leave them starting on their own.
"""

from __future__ import annotations

# Before the fork hooks below: logging's own (which hold its lock across a fork) are then
# inside this module's.
import logging  # noqa: F401
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

WORKER_ENTRY = "from aviso_host.lifecycle import worker_entry; worker_entry()"
"""A worker's command is ``python -c WORKER_ENTRY HOST PORT WORKERS SUPERVISOR_PID READY_FD``."""
PR_SET_PDEATHSIG = 1
"""``prctl`` option (linux/prctl.h): the signal this process gets when its parent dies."""


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived while uvicorn was not handling them: before it served, or
    re-raised by uvicorn once it drained (which would otherwise end the process at once).
    Not an ``Exception``, so that no error handling on its way mistakes it for a failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _StopState:
    """The stop signal taken inside :func:`stop_on_signals`, and whether the main thread is
    forking (between the interpreter's before-fork and after-fork hooks)."""

    received: int | None = None
    forking = False


def _before_fork() -> None:
    if threading.get_ident() == threading.main_thread().ident:
        _StopState.forking = True


def _after_fork() -> None:
    """In the parent, and in the child (whose one thread is its main thread now)."""
    if threading.get_ident() == threading.main_thread().ident:
        _StopState.forking = False


# A signal that arrives while a child is forked (subprocess's preexec_fn runs the fork
# hooks) is handled in the first hook after it: logging's, which releases the lock it took
# before the fork. Raised there, the exception is printed and dropped ("Exception ignored")
# and the lock stays held: the stop would be lost and any other thread that logs would hang.
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Stopped` inside this block (uvicorn installs its own
    handlers while it serves and restores these).

    A signal is also remembered: one taken while the main thread forks is not raised there,
    and one raised where Python drops exceptions (a ``__del__``, a fork hook) is lost too,
    so :func:`raise_if_stopped` raises it where it is safe, before serving."""

    def stopped(signum: int, frame: FrameType | None) -> None:
        _StopState.received = signum
        if not _StopState.forking:
            raise Stopped(signum)

    _StopState.received = None
    previous = {sig: signal.signal(sig, stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _StopState.received = None


def raise_if_stopped() -> None:
    """Raise :class:`Stopped` if :func:`stop_on_signals` took a stop signal that did not
    stop the process where it arrived."""
    if _StopState.received is not None:
        raise Stopped(_StopState.received)


def die_with_parent(parent: int) -> None:
    """Tie this process's life to ``parent``'s: exit now if it is already gone, and (Linux)
    get SIGTERM, a graceful drain, when it dies later, even killed with SIGKILL.

    The kernel's parent-death signal needs nothing of the parent, which may be killed
    outright, and no thread of this process, which may be busy importing for seconds (a
    pipe whose end-of-file a thread watched would be noticed only once that thread runs).
    It is armed only from here on, so the parent's pid is checked after arming it: one that
    died in between has left this process to another parent already."""
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        sys.exit(1)


def worker_entry() -> None:  # pragma: no cover - runs in a worker process
    """A worker process's first code (its command line: :data:`WORKER_ENTRY`)."""
    host, port, workers, supervisor, ready = sys.argv[1:6]
    die_with_parent(int(supervisor))
    try:
        with stop_on_signals():
            from aviso_host.worker import worker_main

            worker_main(host, int(port), int(workers), int(ready))
    except Stopped:
        sys.exit(0)  # asked to stop, and drained if it was serving

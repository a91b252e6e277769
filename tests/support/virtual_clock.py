"""An asyncio loop on a virtual clock, for tests about timers and deadlines.

The clock stands still while the loop has work and jumps to the next timer's time when it
would wait for it, so a test of "this deadline comes before that one" neither waits in real
time nor fails when a loaded machine stalls the process between two steps. Only for code
that waits on the loop's own timers and sockets: a thread's work is not waited for.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


FileObject = int | _HasFileno
"""What a selector watches: a descriptor, or an object that has one."""


class _IdleAdvancingSelector(selectors.BaseSelector):
    """The loop's selector: what is ready now is answered at once; a wait for a timer
    moves the clock by its timeout instead of sleeping."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        self._loop = loop
        self._inner = selectors.DefaultSelector()

    def register(self, fileobj: FileObject, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileObject) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: FileObject, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:
            # No timer scheduled: only a socket or another thread can wake the loop, so it
            # waits for real (a hang is the test timeout's to catch).
            return self._inner.select(None)
        self._loop.virtual_now += timeout
        return []

    def get_map(self) -> Mapping[FileObject, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """``loop.time()`` is :attr:`virtual_now`, which moves only when the loop is idle."""

    def __init__(self) -> None:
        self.virtual_now = 0.0
        super().__init__(_IdleAdvancingSelector(self))

    def time(self) -> float:
        return self.virtual_now


def run_on_virtual_clock(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on a :class:`VirtualClockLoop`."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)

"""Per-stream state shared between the stream's own task and the outside world.

The stream task sleeps on one waiter; live deliveries, shutdown and client disconnects all
wake it through the same :meth:`StreamControl.wake`, so a stream is a single coroutine
rather than a web of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from aviso_host.logs import log_event
from aviso_plugins.types import StoredNotification

# When several stop causes coincide, the one reported is the most important.
_PRECEDENCE = {
    "client_gone": 0,
    "end_of_stream": 1,
    "max_duration_reached": 2,
    "server_shutdown": 3,
}


class StreamControl:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.stop_reason: str | None = None
        self.aborted: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def stop(self, reason: str) -> None:
        if self.stop_reason is None or _PRECEDENCE[reason] > _PRECEDENCE[self.stop_reason]:
            self.stop_reason = reason
        self.wake()

    def abort(self, reason: str) -> None:
        """End the stream without a final event (its client is not reading anyway)."""
        if self.aborted is None and self.task is not None and not self.task.done():
            self.aborted = reason
            self.task.cancel()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def sleep_until(self, when: float) -> None:
        """Sleep until woken or the loop clock reaches ``when``, whichever comes first."""
        loop = asyncio.get_running_loop()
        if when <= loop.time():
            return
        # Streams wake far more often (every live delivery) than their deadline moves (every
        # heartbeat), so one timer is kept and rescheduled only when the deadline changes.
        if self._timer is None or self._timer.when() != when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self.wake)
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class StreamRegistry:
    """The open streams of one service, so shutdown can reach every one of them."""

    def __init__(self) -> None:
        self.open: set[StreamControl] = set()
        self.closing = False

    def add(self, control: StreamControl) -> None:
        self.open.add(control)
        if self.closing:  # opened while shutting down: it ends with only its close event
            control.stop("server_shutdown")

    def discard(self, control: StreamControl) -> None:
        self.open.discard(control)

    def stop_all(self, reason: str) -> None:
        self.closing = True
        for control in tuple(self.open):
            control.stop(reason)


class LiveQueue:
    """A stream's bounded buffer of live records (implements the backend's ``LiveSink``).

    While the stream is still replaying, an overflow drops the oldest buffered record: the
    replay pages over everything stored before it ends, so nothing is lost. Once live, an
    overflow means the client stopped reading; the stream is then disconnected rather than
    let server memory grow.
    """

    def __init__(self, control: StreamControl, capacity: int) -> None:
        self._control = control
        self._capacity = capacity
        self._items: deque[StoredNotification] = deque()
        self.live = False
        self.ended: str | None = None
        self.dropped = 0

    def deliver(self, record: StoredNotification) -> None:
        if len(self._items) >= self._capacity:
            if self.live:
                log_event(
                    "stream.backpressure.disconnect",
                    "client is not reading; closing the stream",
                    logging.WARNING,
                    request_id=self._control.request_id,
                    queued=len(self._items),
                )
                self._items.clear()
                self._control.abort("backpressure")
                return
            self._items.popleft()
            self.dropped += 1
        self._items.append(record)
        self._control.wake()

    def end(self, reason: str) -> None:
        self.ended = reason
        self._control.wake()

    def discard_through(self, sequence: int) -> None:
        """Forget buffered records the replay has already covered."""
        while self._items and self._items[0].sequence <= sequence:
            self._items.popleft()

    def drain(self) -> list[StoredNotification]:
        items = list(self._items)
        self._items.clear()
        return items

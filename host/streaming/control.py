"""Per-stream state shared between the stream's own task and the outside world.

The stream task sleeps on one waiter; live deliveries, shutdown and client disconnects all
wake it through the same :meth:`StreamControl.wake`, so a stream is a single coroutine
rather than a web of tasks.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from aviso_host.logs import log_event
from aviso_plugins.types import StoredNotification

# When several stop causes coincide, the one reported is the most important.
_PRECEDENCE = {
    "client_gone": 0,
    "end_of_stream": 1,
    "slow_consumer": 2,
    "aggregate_group_limit_reached": 2,
    "max_duration_reached": 3,
    # Above the maximum duration: reconnecting with the same credential would fail, and
    # the client must know that before it tries.
    "auth_expired": 4,
    "access_revoked": 5,
    "server_shutdown": 6,
}


class StreamControl:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.stop_reason: str | None = None
        self.aborted: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.Handle | None = None
        self._timer_when = 0.0

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
        if self._timer is None or self._timer_when != when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self._on_timer)
            self._timer_when = when
        waiter = self._waiter = loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def _on_timer(self) -> None:
        self._timer = None
        self.wake()

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


# Grace a stream closing for a slow consumer gets to write its final event before it is cut.
SLOW_CONSUMER_GRACE_SECONDS = 5.0
# Per-record overhead added to the payload size when a queue's bytes are counted.
_RECORD_OVERHEAD = 512


def _size(record: StoredNotification) -> int:
    return len(record.payload) + len(record.topic) + _RECORD_OVERHEAD


@dataclass
class Skipped:
    """Live records the ``drop`` policy skipped since the client last heard about it."""

    count: int = 0
    first: int = 0
    last: int = 0


class LiveQueue:
    """A stream's bounded buffer of live records (implements the backend's ``LiveSink``).

    Bounded by ``capacity`` records and ``max_bytes``. While the stream is still replaying,
    an overflow drops the oldest buffered record: the replay pages over everything stored
    before it ends, so nothing is lost. Once live, an overflow means the client does not
    keep up, and ``policy`` decides: ``disconnect`` ends the stream with ``slow_consumer``
    and the sequence to resume from (cutting it off if it cannot even write that), ``drop``
    skips records and tells the client how many.
    """

    def __init__(self, control: StreamControl, capacity: int, max_bytes: int, policy: str) -> None:
        self._control = control
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._policy = policy
        self._items: deque[StoredNotification] = deque()
        self._bytes = 0
        self.live = False
        self.ended: str | None = None
        self.skipped = Skipped()
        self.first_seen: int | None = None
        self.dropped_through = 0
        """The highest sequence an overflow dropped before the stream went live (its replay
        reads that far, so the drop loses nothing)."""

    def deliver(self, record: StoredNotification) -> None:
        if self.first_seen is None:
            self.first_seen = record.sequence
        size = _size(record)
        while self._items and (
            len(self._items) >= self._capacity or self._bytes + size > self._max_bytes
        ):
            if self.live:
                self._overflow(record)
                return
            dropped = self._items.popleft()
            self._bytes -= _size(dropped)
            self.dropped_through = max(self.dropped_through, dropped.sequence)
        self._items.append(record)
        self._bytes += size
        self._control.wake()

    def _overflow(self, record: StoredNotification) -> None:
        if self._policy == "drop":
            if not self.skipped.count:
                log_event(
                    "stream.backpressure.dropping",
                    "client does not keep up; skipping live notifications",
                    logging.WARNING,
                    request_id=self._control.request_id,
                    first_skipped=record.sequence,
                )
                self.skipped.first = record.sequence
            self.skipped.count += 1
            self.skipped.last = record.sequence
            return
        if self._control.stop_reason is None:
            log_event(
                "stream.backpressure.disconnect",
                "client does not keep up; closing the stream",
                logging.WARNING,
                request_id=self._control.request_id,
                queued=len(self._items),
                queued_bytes=self._bytes,
            )
            asyncio.get_running_loop().call_later(
                SLOW_CONSUMER_GRACE_SECONDS, self._control.abort, "slow_consumer"
            )
        self._items.clear()
        self._bytes = 0
        self._control.stop("slow_consumer")

    def end(self, reason: str) -> None:
        self.ended = reason
        self._control.wake()

    def discard_through(self, sequence: int) -> None:
        """Forget buffered records the replay has already covered."""
        while self._items and self._items[0].sequence <= sequence:
            self._bytes -= _size(self._items.popleft())

    def drain(self) -> list[StoredNotification]:
        if not self._items:
            return []
        items = list(self._items)
        self._items.clear()
        self._bytes = 0
        return items

    @property
    def pending(self) -> bool:
        """Whether the stream has something to take: records, skips or its end."""
        return bool(self._items) or self.skipped.count > 0 or self.ended is not None

    def take_skipped(self) -> Skipped | None:
        if not self.skipped.count:
            return None
        skipped, self.skipped = self.skipped, Skipped()
        return skipped

"""Per-stream state shared between the stream's own task and the outside world.

The stream task sleeps on one waiter; live deliveries, shutdown and client disconnects all
wake it through the same :meth:`StreamControl.wake`, so a stream is a single coroutine
rather than a web of tasks. A live delivery to a stream that is asleep with nothing
pending and a connection that takes writes does not wake it at all: :attr:`LiveQueue.direct`
writes it on the spot.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from aviso_host.logs import log_event
from aviso_plugins.types import StoredNotification

LIMIT_REACHED = "summary_limit_reached"
"""A summary stream's own limit was reached (the plugin's code goes on the wire)."""

# When several stop causes coincide, the one reported is the most important.
_PRECEDENCE = {
    "client_gone": 0,
    "end_of_stream": 1,
    "slow_consumer": 2,
    LIMIT_REACHED: 2,
    "max_duration_reached": 3,
    # Above the maximum duration: reconnecting with the same credential would fail, and
    # the client must know that before it tries.
    "auth_expired": 4,
    "access_revoked": 5,
    "server_shutdown": 6,
}


class StreamControl:
    __slots__ = (
        "_waiter",
        "_woken",
        "aborted",
        "idle_until",
        "request_id",
        "stop_reason",
        "task",
        "timer_when",
    )

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.stop_reason: str | None = None
        self.aborted: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self.idle_until: float | None = None
        """While the stream sleeps and nothing has woken it: when it wakes by itself (its
        next heartbeat, deadline or recheck); ``None`` otherwise."""
        self.timer_when: float | None = None
        """The deadline this stream is registered for in its loop's :class:`WakeTimers`."""

    def stop(self, reason: str) -> None:
        if self.stop_reason is None or _PRECEDENCE[reason] > _PRECEDENCE[self.stop_reason]:
            self.stop_reason = reason
        self.wake()

    def client_gone(self) -> None:
        self.stop("client_gone")

    def abort(self, reason: str) -> None:
        """End the stream without a final event (its client is not reading anyway)."""
        if self.aborted is None and self.task is not None and not self.task.done():
            self.aborted = reason
            self.idle_until = None
            self.task.cancel()

    @property
    def asleep(self) -> bool:
        """Whether the stream is waiting in :meth:`sleep_until` and nothing has woken it."""
        return self.idle_until is not None

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is None:
            self._woken = True  # the stream is busy: its next sleep returns at once
        elif not waiter.done():
            self.idle_until = None
            waiter.set_result(None)

    async def sleep_until(self, when: float) -> None:
        """Sleep until woken or the loop clock reaches ``when``, whichever comes first; a
        wake-up that came while the stream was not sleeping counts too."""
        if self._woken:
            self._woken = False
            return
        loop = asyncio.get_running_loop()
        if when <= loop.time():
            return
        # Streams wake far more often (every live delivery) than their deadline moves (every
        # heartbeat), so the deadline is registered again only when it changes.
        if self.timer_when != when:
            WakeTimers.of(loop).schedule(when, self)
        waiter = self._waiter = loop.create_future()
        self.idle_until = when
        try:
            await waiter
        finally:
            self._waiter = None
            self.idle_until = None

    def cancel_timer(self) -> None:
        if self.timer_when is not None:
            self.timer_when = None
            WakeTimers.of(asyncio.get_running_loop()).cancelled()


class WakeTimers:
    """Every stream's next deadline (heartbeat, maximum duration, replay pacing) on one loop
    timer: a heap entry per stream instead of a timer handle each, which with thousands of
    idle watches is a good part of what one costs.

    An entry is current while its stream's ``timer_when`` still equals its time; entries a
    stream moved away from are skipped when they come due, and compacted away once they
    outnumber the current ones.
    """

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WakeTimers]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, StreamControl]] = []
        self._order = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._handle_when = math.inf
        self._stale = 0

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> WakeTimers:
        timers = cls._by_loop.get(loop)
        if timers is None:
            timers = cls._by_loop[loop] = cls(loop)
        return timers

    def schedule(self, when: float, control: StreamControl) -> None:
        if control.timer_when is not None:
            self._stale += 1
        control.timer_when = when
        heapq.heappush(self._heap, (when, next(self._order), control))
        if when < self._handle_when:
            self._arm(when)
        self._compact()

    def cancelled(self) -> None:
        self._stale += 1
        self._compact()

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle_when = when
        self._handle = self._loop.call_at(when, self._fire) if when != math.inf else None

    def _fire(self) -> None:
        self._handle = None
        self._handle_when = math.inf
        heap = self._heap
        # A loop may run a timer up to its clock resolution early; the stream re-registers
        # a deadline it was woken before.
        due = self._loop.time() + 0.001
        while heap and heap[0][0] <= due:
            when, _, control = heapq.heappop(heap)
            if control.timer_when != when:
                self._stale -= 1
                continue
            control.timer_when = None
            control.wake()
        if heap:
            self._arm(heap[0][0])

    def _compact(self) -> None:
        if self._stale > len(self._heap) // 2 + 1024:
            self._heap = [entry for entry in self._heap if entry[2].timer_when == entry[0]]
            heapq.heapify(self._heap)
            self._stale = 0
            self._arm(self._heap[0][0] if self._heap else math.inf)


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


@dataclass(slots=True)
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

    __slots__ = (
        "_bytes",
        "_capacity",
        "_control",
        "_items",
        "_max_bytes",
        "_policy",
        "direct",
        "dropped_through",
        "ended",
        "first_seen",
        "live",
        "skipped",
    )

    def __init__(self, control: StreamControl, capacity: int, max_bytes: int, policy: str) -> None:
        self._control = control
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._policy = policy
        # A list, not a deque: an empty list costs a few dozen bytes where an empty deque
        # costs ~700, times every idle watch; drain hands the list over without copying.
        # Only the rare pre-live overflow takes from the front.
        self._items: list[StoredNotification] = []
        self._bytes = 0
        self.live = False
        self.ended: str | None = None
        self.skipped = Skipped()
        self.first_seen: int | None = None
        self.dropped_through = 0
        """The highest sequence an overflow dropped before the stream went live (its replay
        reads that far, so the drop loses nothing)."""
        self.direct: Callable[[StoredNotification], bool] | None = None
        """Set by a live stream: takes a record that finds the queue empty, ``True`` when it
        dealt with it there and then (written to the client, or not selected), ``False``
        when the record must be queued for the stream's task."""

    def deliver(self, record: StoredNotification) -> None:
        if self.first_seen is None:
            self.first_seen = record.sequence
        direct = self.direct
        if direct is not None and not self._items and direct(record):
            return
        size = _size(record)
        while self._items and (
            len(self._items) >= self._capacity or self._bytes + size > self._max_bytes
        ):
            if self.live:
                self._overflow(record)
                return
            dropped = self._items.pop(0)
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
        items = self._items
        covered = 0
        while covered < len(items) and items[covered].sequence <= sequence:
            self._bytes -= _size(items[covered])
            covered += 1
        del items[:covered]

    def drain(self) -> list[StoredNotification]:
        items = self._items
        if not items:
            return []
        self._items = []
        self._bytes = 0
        return items

    def take_skipped(self) -> Skipped | None:
        if not self.skipped.count:
            return None
        skipped, self.skipped = self.skipped, Skipped()
        return skipped

"""A summary stream: a watch whose notifications are taken into a plugin's summary
(:class:`aviso_plugins.service.Summary`) instead of being delivered.

It reuses the watch machinery of :class:`EventStream` (history paging, the live queue and
the replay-to-live seam, heartbeats, maximum duration, shutdown, backpressure) and replaces
only what is emitted: one snapshot once history is taken in, then an update at most once per
debounce window, and none when the summary did not change.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable
from typing import Any, ClassVar

from aviso_host.cursors import now_whole_seconds
from aviso_host.errors import log_failure
from aviso_host.streaming import frames
from aviso_host.streaming.control import LIMIT_REACHED
from aviso_host.streaming.stream import EventStream, ReplayOutcome, ReplayStart
from aviso_plugins.service import Summary, SummaryLimitReached
from aviso_plugins.types import StoredNotification

_LINE_BREAKS = re.compile(rb"[\r\n]")


class SummaryStream(EventStream):
    """ASGI app answering one summary request with ``text/event-stream``.

    Shape: the snapshot first (held back while history is taken in, so any ``history_gap``,
    ``notification_replay_limit_reached`` or ``stream_processing_failed`` of the history
    follows it), then ``heartbeat`` and update events, then ``connection-closing`` as on a
    watch. A summary that was capped or failed is not continued live: its snapshot and flag
    are followed by ``end_of_stream``.
    """

    # Live records are taken in and debounced by the task, never written as they are.
    writes_live_events_directly: ClassVar[bool] = False

    def __init__(
        self, *, summary: Summary, debounce_ms: int, replay: ReplayStart, **stream: Any
    ) -> None:
        super().__init__(replay=replay, is_watch=True, **stream)
        self._summary = summary
        self._replay_start = replay
        self._debounce = debounce_ms / 1000
        self._changed = False
        self._window: asyncio.TimerHandle | None = None
        self._due = math.inf
        self._limit_closing: bytes | None = None
        """The ``connection-closing`` of the summary's limit, once it is reached."""
        self._ending: tuple[str, bytes] | None = None
        """The stop reason that ends the stream without a summary, and what says why."""
        self._holding = False
        """Set while history is taken in: nothing is written before the snapshot."""

    async def _run(self) -> None:
        if self._control.stop_reason is not None:
            return await self._close()
        first_heartbeat, self._next_heartbeat = self._next_heartbeat, math.inf
        self._holding = True
        try:
            end = await self._resolve_end(self._replay_start)
        except Exception as exc:
            self._replay_failed(exc)
            outcome = ReplayOutcome.FAILED
        else:
            outcome = await self._replay_through(self._replay_start.cursor, end)
        self._holding = False
        self._next_heartbeat = first_heartbeat
        if outcome is not ReplayOutcome.STOPPED and self._ending is None:
            self._out[:0] = self._render("snapshot")
        if outcome is ReplayOutcome.STOPPED or self._ending is not None:
            # Stopped while taking history in, or the summary failed: no snapshot, only why
            # the stream ends.
            self._out.clear()
            return await self._close()
        # No live feed, a capped or a failed history: the snapshot is all there is (a
        # summary that goes on from an incomplete history would be wrong without saying so).
        if self._live is None or outcome is not ReplayOutcome.COMPLETED:
            self._control.stop("end_of_stream")
            return await self._close()
        await self._follow_live(self._seam())
        await self._close()

    def _emit(
        self, event: bytes, records: Iterable[StoredNotification], budget: int | None = None
    ) -> int:
        """Take in instead of render (history pages and live records both come through here,
        selected by the stream filter).

        Live, the first change after an update opens the debounce window: a timer wakes the
        watch's live loop at its end, and :meth:`_tick` then writes one update for it.
        """
        taken = 0
        try:
            for record in records:
                self._changed |= self._summary.add(record)
                self._through = record.sequence
                taken += 1
                if taken == budget:
                    break
        except SummaryLimitReached as limit:
            # No summary follows (one missing a part would read as complete); the error
            # says which limit was reached and what to change.
            self._limit_reached(limit)
            return taken
        except Exception as exc:
            self._failed(exc)
            return taken
        if self._changed and self._window is None and self._live is not None and self._live.live:
            self._due = self._now() + self._debounce
            self._window = asyncio.get_running_loop().call_at(self._due, self._control.wake)
        return taken

    def _tick(self) -> None:
        """The update of a debounce window that has ended, then the heartbeat if due."""
        if self._window is not None and self._now() >= self._due:
            self._window.cancel()
            self._window = None
            # A summary that failed or reached its limit in this batch writes nothing more.
            if self._ending is None:
                self._out += self._render("update")
        super()._tick()

    def _wake_at(self) -> float:
        # The limit stops the stream from inside the live loop's own taking in, where no
        # wake-up follows: the loop must not sleep until its next timer.
        if self._control.stop_reason is not None:
            return -math.inf
        # An open debounce window is due too: its timer may fire a little before ``_due``
        # (uvloop's timers count whole milliseconds), and ``_tick`` then leaves the update
        # for later; without this the loop would sleep on to the next heartbeat.
        due = self._due if self._window is not None else math.inf
        return min(super()._wake_at(), due)

    def _limit_reached(self, limit: SummaryLimitReached) -> None:
        """Both frames are built at once: a plugin's limit whose words no frame can carry
        (details that are not JSON) is a failed summary, not a connection cut mid-chunk."""
        request_id = self._control.request_id
        try:
            error = frames.limit_reached(
                self._topic, limit.code, limit.message, limit.details, request_id
            )
            self._limit_closing = frames.connection_closing(
                self._topic, limit.code, request_id, message=limit.closing
            )
        except Exception as exc:
            self._failed(exc)
            return
        self._end(LIMIT_REACHED, error)

    def _failed(self, exc: Exception) -> None:
        """The plugin's summary raised (or gave junk): said as a failed read, logged."""
        log_failure("stream.summary.failed", "summary failed", exc, topic=self._topic)
        self._metrics.stream_error()
        self._end("end_of_stream", frames.batch_failed(self._topic, self._control.request_id))

    def _end(self, reason: str, frame: bytes) -> None:
        self._ending = (reason, frame)
        self._control.stop(reason)

    async def _close(self) -> None:
        if self._window is not None:
            self._window.cancel()
        if self._ending is not None and self._control.stop_reason == self._ending[0]:
            self._out += self._ending[1]
        await super()._close()

    def _closing(self, reason: str, resume: int | None) -> bytes:
        if self._limit_closing is None or reason != LIMIT_REACHED:
            return super()._closing(reason, resume)
        return self._limit_closing

    def _render(self, kind: str) -> bytes:
        """The summary's event, or nothing when the plugin's summary fails to render it (the
        stream then ends as :meth:`_failed` says)."""
        self._changed = False
        members = {
            "type": kind,
            "topic": self._topic,
            "timestamp": now_whole_seconds(),
            "request_id": self._control.request_id,
        }
        try:
            event = self._summary.event.encode()
            data = self._summary.render(members)
            # A line break would end the frame early and let the rest pose as other events.
            if not isinstance(data, bytes) or _LINE_BREAKS.search(event + data):
                raise ValueError(f"summary rendered no one-line frame: {event!r} {data!r:.200}")
            return frames.frame(event, data)
        except Exception as exc:
            self._failed(exc)
            return b""

    async def _flush(self) -> None:
        if not self._holding:
            await super()._flush()

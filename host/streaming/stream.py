"""The SSE response of watch and replay: one coroutine per stream that owns its lifecycle.

Shape: an opening control event, then for cursor streams the
history in batches, then (watch only) the live feed; heartbeats, the maximum duration and
server shutdown are enforced here and nowhere else.

A cursor stream resolves its history bound once: ``H``, the last sequence allocated when the
stream started (captured after the live subscription exists, so the replay covers ``<= H``
and the live feed ``> H`` with nothing missed or repeated), and the end point of a replay
(``to_id`` / ``to_date``) as a sequence ``<= H``, announced in the opening event. A replay
that is capped (``max_historical_notifications``) or fails ends the stream with
``end_of_stream`` and no ``replay_completed``; a watch then never goes live.

Events are accumulated and written in one ``send`` per batch or wake-up, which is what makes
replay fast.

A live record reaching a stream whose task is asleep, with nothing queued or due and a
connection below its write high-water mark, is written there and then by the fan-out
(:meth:`EventStream._deliver_now`), as the HTTP chunk its task would have written: the
CloudEvent, SSE frame and chunk are built once per record for every such stream, and no
task wakes. Any other record takes the queue, so backpressure, the slow-consumer policy,
heartbeats, deadlines and re-authorisation are the task's as before, and order holds: the
task empties the queue and writes it out before it sleeps again.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import ClassVar

from starlette.types import Receive, Scope, Send

from aviso_host.auth.reauthorise import Reauthorisation
from aviso_host.cloudevents import CloudEventError, CloudEventRenderer
from aviso_host.config.settings import WatchSettings
from aviso_host.errors import log_failure
from aviso_host.filtering import StreamFilter
from aviso_host.http_protocol import abort_connection, chunk_writer, on_client_gone
from aviso_host.logs import log_event, logger
from aviso_host.metrics import PendingCount, SseConnection
from aviso_host.request_id import RAW_SEND
from aviso_host.streaming import frames
from aviso_host.streaming.control import LiveQueue, StreamControl, StreamRegistry
from aviso_plugins.topics import TopicDecodeError, decode_topic
from aviso_plugins.types import StartCursor, StorageBackend, StoredNotification, Subscription

RESOLVE_TIMEOUT_SECONDS = 5.0
"""How long the history bound and end point may take to resolve before the stream fails."""


class ResolveTimeout(TimeoutError):
    """The bounds took longer than ``RESOLVE_TIMEOUT_SECONDS``: the host's own words, which
    the client's ``error`` event repeats."""


SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"connection", b"keep-alive"),
    (b"access-control-allow-origin", b"*"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(frozen=True, slots=True)
class ReplayStart:
    """A parsed start cursor plus how ``replay_started`` echoes it."""

    cursor: StartCursor
    from_sequence: int | None
    from_date: datetime | None
    to_sequence: int | None = None
    """``to_id`` (inclusive), replay only."""
    to_time_ns: int | None = None
    """``to_date`` (inclusive, storage time), replay only."""

    @property
    def has_end(self) -> bool:
        return self.to_sequence is not None or self.to_time_ns is not None


class ReplayOutcome(Enum):
    COMPLETED = "completed"
    """Everything up to the end was read: ``replay_completed`` follows."""
    LIMITED = "limited"
    """The cap was filled and one more match exists; the limit event was written."""
    FAILED = "failed"
    """A history page could not be read; the error event was written."""
    STOPPED = "stopped"
    """The stream is stopping (shutdown, maximum duration, client gone)."""


class _LiveChunk:
    """The HTTP chunk of the ``live-notification`` frame of the record fanned out last: a
    fan-out sweep hands one record to every matching stream in turn, so the first stream
    builds it and the rest reuse it. Holding the record keeps its identity from being
    reused by another."""

    __slots__ = ("chunk", "record")

    def __init__(self) -> None:
        self.record: StoredNotification | None = None
        self.chunk = b""

    def build(self, record: StoredNotification, renderer: CloudEventRenderer) -> bytes | None:
        """Make ``record`` the cached one; ``None`` when it has no CloudEvent (the stream's
        task reports that)."""
        try:
            data = renderer.render(record)
        except CloudEventError:
            return None
        self.chunk = frames.http_chunk(frames.frame(frames.LIVE, data))
        self.record = record
        return self.chunk


_LIVE_CHUNK = _LiveChunk()


def _display(topic: str) -> str:
    try:
        return ".".join(decode_topic(topic))
    except TopicDecodeError:
        return topic


class EventStream:
    """ASGI app answering one watch or replay request with ``text/event-stream``."""

    # Slots for what every open stream holds (as its control, live queue, and the protocol's
    # objects): an instance dict is a few hundred bytes per idle watch.
    __slots__ = (
        "_backend",
        "_bound",
        "_control",
        "_deadline",
        "_delivered",
        "_event_ids",
        "_fetched_through",
        "_filter",
        "_high_water",
        "_is_watch",
        "_live",
        "_metrics",
        "_next_heartbeat",
        "_now",
        "_on_delivered",
        "_out",
        "_reauthorisation",
        "_recorded",
        "_renderer",
        "_replay",
        "_send",
        "_sent",
        "_settings",
        "_streams",
        "_subscription",
        "_through",
        "_topic",
        "_write_chunk",
    )
    writes_live_events_directly: ClassVar[bool] = True
    """Whether live records may bypass the task (:meth:`_deliver_now`): a stream that
    writes something other than each record's own frame (a summary) says no."""

    def __init__(
        self,
        *,
        backend: StorageBackend,
        renderer: CloudEventRenderer,
        settings: WatchSettings,
        streams: StreamRegistry,
        control: StreamControl,
        stream_filter: StreamFilter,
        replay: ReplayStart | None,
        live: LiveQueue | None,
        subscription: Subscription | None,
        is_watch: bool,
        metrics: SseConnection,
        reauthorisation: Reauthorisation | None = None,
        event_ids: bool = False,
        on_delivered: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """``event_ids``: notification frames carry ``id: <sequence>``; ``on_delivered`` is
        awaited with the highest sequence framed before the frames are sent (so what it
        records covers whatever the client can have received)."""
        self._backend = backend
        self._renderer = renderer
        self._settings = settings
        self._streams = streams
        self._control = control
        self._filter = stream_filter
        self._replay = replay
        self._live = live
        self._subscription = subscription
        self._is_watch = is_watch
        self._metrics = metrics
        self._reauthorisation = reauthorisation
        self._event_ids = event_ids
        self._on_delivered = on_delivered
        self._topic = stream_filter.pattern.display
        self._send: Send | None = None
        self._write_chunk: Callable[[bytes], bool] | None = None
        self._sent: PendingCount | None = None
        """Where direct writes are counted (``aviso_sse_events_sent_total``)."""
        self._high_water = 0
        """Live records at or below this were replayed (or precede the stream)."""
        self._out = bytearray()
        self._through = 0
        """The highest sequence written to the client so far (the resume point minus one)."""
        self._recorded = 0
        """The highest sequence ``on_delivered`` was awaited with."""
        self._bound: int | None = None
        """``H``: replay reads up to it, live delivers above it; ``None`` when the backend
        cannot tell (the seam is then the last sequence the replay fetched)."""
        self._fetched_through = 0
        self._delivered = 0
        """History notifications delivered so far (what ``max_historical_notifications``
        caps, across every page of the request)."""
        # The event loop's clock, the one stream timers are scheduled on.
        self._now = asyncio.get_running_loop().time
        started = self._now()
        watch = settings if is_watch else None
        self._deadline = started + watch.connection_max_duration_sec if watch else math.inf
        self._next_heartbeat = started if watch else math.inf

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        control = self._control
        control.task = asyncio.current_task()
        self._streams.add(control)
        self._metrics.opened()
        self._log_opened()
        self._send = send
        # Under aviso's protocol the connection itself says when the client goes away; a
        # task per stream waiting for it on ``receive`` would cost every idle watch ~1 KB.
        watcher = (
            None
            if on_client_gone(scope, control.client_gone)
            else asyncio.create_task(self._watch_disconnect(receive))
        )
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            # The head went through every middleware (request id, status for the request log
            # and metrics); the body chunks, one per delivery, need none of them.
            self._send = scope.get(RAW_SEND, send)
            self._write_chunk = chunk_writer(scope)
            await self._run()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if control.aborted is None:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            # Its client reads nothing: a close would wait forever to flush what is queued.
            abort_connection(scope)
        finally:
            control.cancel_timer()
            self._metrics.closed(control.stop_reason)
            if self._reauthorisation is not None:
                self._reauthorisation.close()
            if watcher is None:
                on_client_gone(scope, None)
            else:
                watcher.cancel()
            self._streams.discard(control)
            if self._subscription is not None:
                await self._subscription.close()

    def _log_opened(self) -> None:
        """The stream's ``http.request`` line is written when it ends, maybe hours later:
        this one says at once that it opened, and from where it reads."""
        if not logger.isEnabledFor(logging.INFO):  # the line would be dropped: do not build it
            return
        replay = self._replay
        log_event(
            "stream.opened",
            f"{'watch' if self._is_watch else 'replay'} opened on {self._topic}",
            kind="watch" if self._is_watch else "replay",
            topic=self._topic,
            from_id=None if replay is None else replay.from_sequence,
            from_date=None if replay is None or replay.from_date is None else str(replay.from_date),
        )

    async def _watch_disconnect(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._control.stop("client_gone")

    # -- phases ----------------------------------------------------------------------------

    async def _run(self) -> None:
        request_id = self._control.request_id
        if self._control.stop_reason is not None:
            return await self._close()
        if self._replay is None:
            self._out += frames.connection_established(
                self._topic, self._settings.connection_max_duration_sec, request_id
            )
            self._tick()
            await self._flush()
            await self._follow_live(0)
            return await self._close()
        replay = self._replay
        # The opening goes out at once; only an end point must be resolved before it (it is
        # announced in it). A failed resolution still follows the opening, as an error.
        end: int | None = None
        failure: Exception | None = None
        if replay.has_end:
            end, failure = await self._try_resolve_end(replay)
        self._out += self._replay_started(end)
        self._tick()
        await self._flush()
        if not replay.has_end:
            end, failure = await self._try_resolve_end(replay)
        if failure is not None:
            self._replay_failed(failure)
            self._control.stop("end_of_stream")
            return await self._close()
        outcome = await self._replay_through(replay.cursor, end)
        if outcome is ReplayOutcome.STOPPED:
            return await self._close()
        if outcome is not ReplayOutcome.COMPLETED:
            self._control.stop("end_of_stream")
            return await self._close()
        self._out += frames.replay_completed(self._topic)
        if not self._is_watch or self._live is None:
            self._control.stop("end_of_stream")
            return await self._close()
        await self._follow_live(self._seam())
        await self._close()

    def _replay_started(self, end_sequence: int | None) -> bytes:
        replay = self._replay
        assert replay is not None
        return frames.replay_started(
            self._topic,
            replay.from_sequence,
            replay.from_date,
            self._settings.replay_batch_size,
            self._control.request_id,
            end_sequence,
        )

    async def _try_resolve_end(self, replay: ReplayStart) -> tuple[int | None, Exception | None]:
        """Bounded, so that a stalled backend cannot hold the opening past the client's
        deadline (pyaviso gives up 10 s after the request)."""
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                return await self._resolve_end(replay), None
        except TimeoutError:
            message = f"resolving the replay bounds took over {RESOLVE_TIMEOUT_SECONDS:g} s"
            return None, ResolveTimeout(message)
        except Exception as exc:
            return None, exc

    async def _resolve_end(self, replay: ReplayStart) -> int | None:
        """Capture ``H`` and turn the end point into a sequence (``None``: no end known).

        Both are searches in the backend, never a scan of history.
        """
        pattern = self._filter.pattern
        bound = self._bound = await self._backend.history_bound(pattern)
        if bound is not None and self._live is not None:
            self._live.discard_through(bound)
        if replay.to_sequence is not None:
            return replay.to_sequence if bound is None else min(replay.to_sequence, bound)
        if replay.to_time_ns is not None:
            after = await self._backend.first_sequence_after(pattern, replay.to_time_ns)
            if after is not None:
                end = max(after - 1, 0)
                return end if bound is None else min(end, bound)
        return bound

    def _seam(self) -> int:
        """Live records at or below this were (or will never be) replayed."""
        return self._bound if self._bound is not None else self._fetched_through

    async def _replay_through(self, cursor: StartCursor, end: int | None) -> ReplayOutcome:
        """The replay up to ``end``, then, on a watch whose live buffer overflowed while it
        replayed, the history the buffer lost (records above ``H``), so that the live feed
        resumes exactly after it."""
        await self._check_gap(cursor)
        outcome = await self._replay_history(cursor, end)
        live = self._live
        while (
            outcome is ReplayOutcome.COMPLETED
            and live is not None
            and self._bound is not None
            and live.dropped_through > self._bound
        ):
            start = StartCursor(from_sequence=self._bound + 1)
            self._bound = live.dropped_through
            outcome = await self._replay_history(start, self._bound)
        return outcome

    async def _replay_history(self, cursor: StartCursor, end: int | None) -> ReplayOutcome:
        """Page through history up to ``end`` (inclusive; ``None``: as far as it goes).

        At most ``max_historical_notifications`` matches are delivered; once they are, the
        pages go on (still up to ``end``) only to find out whether one more exists.
        """
        settings = self._settings
        cap = settings.max_historical_notifications
        while True:
            if self._stopping():
                return ReplayOutcome.STOPPED
            try:
                batch = await self._backend.fetch_batch(
                    self._filter.pattern, cursor, settings.replay_batch_size
                )
            except Exception as exc:
                self._replay_failed(exc)
                return ReplayOutcome.FAILED
            records = batch.messages
            done = not batch.has_more or batch.next_sequence is None
            if end is not None:
                if records and records[-1].sequence > end:
                    records = [record for record in records if record.sequence <= end]
                if batch.next_sequence is None or batch.next_sequence > end:
                    done = True
            if records:
                self._fetched_through = records[-1].sequence
                if self._live is not None and self._bound is None:
                    self._live.discard_through(self._fetched_through)
            pending = iter(await self._filter.select(records))
            if self._delivered < cap:
                self._delivered += self._emit(frames.REPLAY, pending, cap - self._delivered)
            if self._delivered >= cap and self._deliverable(pending):
                self._out += frames.replay_limit_reached(self._topic, cap)
                return ReplayOutcome.LIMITED
            if done:
                return ReplayOutcome.COMPLETED
            assert batch.next_sequence is not None
            cursor = StartCursor(from_sequence=batch.next_sequence)
            self._tick()
            await self._flush()
            await self._pause(settings.replay_batch_delay_ms / 1000)

    def _replay_failed(self, exc: Exception) -> None:
        log_failure("stream.replay.batch_failed", "history batch failed", exc, topic=self._topic)
        # The client gets the event's code and a generic message, never the text of an
        # exception raised below the host (only the host's own timeout says what it is).
        message = str(exc) if isinstance(exc, ResolveTimeout) else frames.BATCH_FAILED_MESSAGE
        self._out += frames.batch_failed(self._topic, self._control.request_id, message)
        self._metrics.stream_error()

    def _deliverable(self, records: Iterator[StoredNotification]) -> bool:
        """Whether one of ``records`` (already selected by the filter) would be delivered."""
        for record in records:
            try:
                self._renderer.render(record)
            except CloudEventError:
                continue
            return True
        return False

    async def _check_gap(self, cursor: StartCursor) -> None:
        """Say so before anything else when the requested history is gone: pruned, or
        beyond the stream's end.

        A resume point past the last sequence allocated plus one comes from an earlier
        incarnation of the stream (an in-memory server restarted, a stream deleted and
        re-created), which numbers from 1 again. Its replay stays empty and a watch goes
        live, as for any start beyond the end; the event tells the client where what is
        retained now begins.
        """
        requested = cursor.from_sequence
        base = self._filter.pattern.base
        if not requested or base is None:
            return
        try:
            pruned = await self._backend.pruned_through(base)
        except Exception as exc:  # the replay itself will report a failing backend
            log_event("stream.gap_check.failed", str(exc), logging.WARNING, topic=self._topic)
            return
        beyond_end = self._bound is not None and requested > self._bound + 1
        if requested <= pruned or beyond_end:
            self._out += frames.history_gap(self._topic, requested, pruned + 1)
            self._metrics.history_gap()
            log_event(
                "stream.history_gap",
                "requested history is beyond the stream's end"
                if beyond_end
                else "requested history was pruned",
                logging.INFO,
                topic=self._topic,
                requested=requested,
                first_available=pruned + 1,
            )

    async def _follow_live(self, high_water: int) -> None:
        live = self._live
        assert live is not None
        live.live = True
        self._high_water = high_water
        if (
            self.writes_live_events_directly
            and self._write_chunk is not None
            and self._on_delivered is None
            and not self._event_ids
            and self._filter.spatial is None  # may have to be matched off the event loop
        ):
            self._sent = self._metrics.sent_count()
            live.direct = self._deliver_now
        # One coroutine, not two: every idle watch holds each frame of its task while it sleeps.
        try:
            while not self._stopping():
                skipped = live.take_skipped()
                if skipped is not None:
                    self._out += frames.notifications_skipped(
                        self._topic, skipped.count, skipped.first, skipped.last
                    )
                    self._metrics.notifications_skipped(skipped.count)
                records = live.drain()
                if records:
                    if records[0].sequence <= high_water:
                        records = [record for record in records if record.sequence > high_water]
                    self._emit(frames.LIVE, await self._filter.select(records))
                if live.ended is not None and not self._out:
                    self._control.stop("end_of_stream")
                    return
                self._tick()
                if self._out:
                    # A wake-up while the flush waited (a delivery, a stop, a summary's
                    # debounce window) makes the sleep below return at once.
                    await self._flush()
                await self._control.sleep_until(self._wake_at())
        finally:
            live.direct = None

    def _deliver_now(self, record: StoredNotification) -> bool:
        """Write a live record straight to the connection, from the fan-out, if the stream's
        task has nothing to do first; ``True`` when the record is dealt with (written, or
        not for this stream), ``False`` when it must be queued for the task."""
        # Awake (woken, or busy writing), or asleep past a heartbeat, deadline or recheck
        # that is due: the task's own work goes out first.
        idle_until = self._control.idle_until
        if idle_until is None or self._now() >= idle_until:
            return False
        if record.sequence <= self._high_water:
            return True
        stream_filter = self._filter
        if stream_filter.fields and not stream_filter.accepts(record):
            return True
        cached = _LIVE_CHUNK
        chunk = cached.chunk if record is cached.record else cached.build(record, self._renderer)
        write = self._write_chunk
        if chunk is None or write is None or not write(chunk):
            return False
        self._through = record.sequence
        sent = self._sent
        assert sent is not None  # set with ``live.direct``
        if not sent.count:
            sent.flush_soon()
        sent.count += 1
        return True

    async def _close(self) -> None:
        reason = self._control.stop_reason
        if reason is not None and reason != "client_gone":
            resume = None
            if reason == "slow_consumer":
                first_seen = self._live.first_seen if self._live is not None else None
                resume = self._through + 1 if self._through else first_seen
            self._out += self._closing(reason, resume)
        await self._flush()

    def _closing(self, reason: str, resume: int | None) -> bytes:
        return frames.connection_closing(self._topic, reason, self._control.request_id, resume)

    # -- helpers ---------------------------------------------------------------------------

    def _stopping(self) -> bool:
        now = self._now()
        if now >= self._deadline:
            self._control.stop("max_duration_reached")
        if self._reauthorisation is not None:
            self._reauthorisation.poll(now)
        return self._control.stop_reason is not None

    def _wake_at(self) -> float:
        """The next moment the stream has something to do without being woken."""
        wake_at = min(self._next_heartbeat, self._deadline)
        if self._reauthorisation is not None:
            wake_at = min(wake_at, self._reauthorisation.wake_at())
        return wake_at

    def _tick(self) -> None:
        """Queue a heartbeat when one is due (watch streams only)."""
        now = self._now()
        if now >= self._next_heartbeat:
            self._out += frames.heartbeat(self._topic)
            interval = self._settings.sse_heartbeat_interval_sec
            while self._next_heartbeat <= now:
                self._next_heartbeat += interval

    async def _pause(self, seconds: float) -> None:
        """Wait between replay batches, still honouring heartbeats and stop requests."""
        if seconds <= 0:
            # Unpaced, a batch boundary is still a scheduling point: without it one large
            # replay would hold the event loop, and every other client of the process,
            # until its last batch (a send only waits when the client falls behind).
            await asyncio.sleep(0)
            return
        until = self._now() + seconds
        while not self._stopping() and self._now() < until:
            await self._control.sleep_until(min(until, self._wake_at()))
            self._tick()
            await self._flush()

    def _emit(
        self, event: bytes, records: Iterable[StoredNotification], budget: int | None = None
    ) -> int:
        """Frame records the filter already selected; return how many were delivered.

        With a ``budget``, stop taking records from ``records`` once that many were
        delivered (what is left of an iterator is then still unread).
        """
        sent = 0
        for record in records:
            try:
                data = self._renderer.render(record)
                if self._event_ids:
                    self._out += frames.frame_with_id(event, data, record.sequence)
                else:
                    self._out += frames.frame(event, data)
                self._through = record.sequence
                sent += 1
            except CloudEventError as exc:
                self._out += frames.cloudevent_failed(
                    _display(record.topic), record.sequence, str(exc), self._control.request_id
                )
                self._metrics.stream_error()
                continue
            if sent == budget:
                break
        self._metrics.events_sent(sent)
        return sent

    async def _flush(self) -> None:
        if self._on_delivered is not None and self._through > self._recorded:
            self._recorded = self._through
            await self._on_delivered(self._through)
        if self._out and self._send is not None:
            chunk = bytes(self._out)
            self._out.clear()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

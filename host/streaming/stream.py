"""The SSE response of watch and replay: one coroutine per stream that owns its lifecycle.

Shape (see the streaming chapter): an opening control event, then for cursor streams the
history in batches, then (watch only) the live feed; heartbeats, the maximum duration and
server shutdown are enforced here and nowhere else. Events are accumulated and written in
one ``send`` per batch or wake-up, which is what makes replay fast.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from starlette.types import Receive, Scope, Send

from aviso_host.auth.reauthorise import Reauthorisation
from aviso_host.cloudevents import CloudEventError, CloudEventRenderer
from aviso_host.config.settings import WatchSettings
from aviso_host.filtering import StreamFilter
from aviso_host.http_protocol import abort_connection
from aviso_host.logs import log_event
from aviso_host.metrics import SseConnection
from aviso_host.streaming import frames
from aviso_host.streaming.control import LiveQueue, StreamControl, StreamRegistry
from aviso_plugins.topics import TopicDecodeError, decode_topic
from aviso_plugins.types import StartCursor, StorageBackend, StoredNotification, Subscription

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


def _display(topic: str) -> str:
    try:
        return ".".join(decode_topic(topic))
    except TopicDecodeError:
        return topic


class EventStream:
    """ASGI app answering one watch or replay request with ``text/event-stream``."""

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
    ) -> None:
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
        self._topic = stream_filter.pattern.display
        self._send: Send | None = None
        self._out = bytearray()
        self._through = 0
        """The highest sequence written to the client so far (the resume point minus one)."""
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
        self._send = send
        watcher = asyncio.create_task(self._watch_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
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
            watcher.cancel()
            self._streams.discard(control)
            if self._subscription is not None:
                await self._subscription.close()

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
        else:
            self._out += frames.replay_started(
                self._topic,
                self._replay.from_sequence,
                self._replay.from_date,
                self._settings.replay_batch_size,
                request_id,
            )
        self._tick()
        await self._flush()
        high_water = 0
        if self._replay is not None:
            replayed = await self._replay_history(self._replay.cursor)
            if replayed is None:
                return await self._close()
            high_water = replayed
            self._out += frames.replay_completed(self._topic)
            if not self._is_watch or self._live is None:
                self._control.stop("end_of_stream")
                return await self._close()
        await self._follow_live(high_water)
        await self._close()

    async def _replay_history(self, cursor: StartCursor) -> int | None:
        """Page through history; return the highest sequence fetched, ``None`` if stopped."""
        settings = self._settings
        remaining = settings.max_historical_notifications
        high_water = 0
        await self._check_gap(cursor)
        while True:
            if self._stopping():
                return None
            try:
                if remaining == 0:
                    probe = await self._backend.fetch_batch(self._filter.pattern, cursor, 1)
                    if probe.messages:
                        self._out += frames.replay_limit_reached(
                            self._topic, settings.max_historical_notifications
                        )
                    return high_water
                batch = await self._backend.fetch_batch(
                    self._filter.pattern, cursor, min(settings.replay_batch_size, remaining)
                )
            except Exception as exc:
                log_event(
                    "stream.replay.batch_failed",
                    f"history batch failed: {exc}",
                    logging.ERROR,
                    topic=self._topic,
                )
                self._out += frames.batch_failed(self._topic, str(exc), self._control.request_id)
                self._metrics.stream_error()
                return high_water
            remaining -= len(batch.messages)
            if batch.last_sequence is not None:
                high_water = batch.last_sequence
                if self._live is not None:
                    self._live.discard_through(high_water)
            self._emit(frames.REPLAY, batch.messages)
            if not batch.has_more or batch.next_sequence is None:
                return high_water
            cursor = StartCursor(from_sequence=batch.next_sequence)
            self._tick()
            await self._flush()
            await self._pause(settings.replay_batch_delay_ms / 1000)

    async def _check_gap(self, cursor: StartCursor) -> None:
        """Say so before anything else when the requested history has been pruned."""
        requested = cursor.from_sequence
        base = self._filter.pattern.base
        if not requested or base is None:
            return
        try:
            pruned = await self._backend.pruned_through(base)
        except Exception as exc:  # the replay itself will report a failing backend
            log_event("stream.gap_check.failed", str(exc), logging.WARNING, topic=self._topic)
            return
        if requested <= pruned:
            self._out += frames.history_gap(self._topic, requested, pruned + 1)
            self._metrics.history_gap()
            log_event(
                "stream.history_gap",
                "requested history was pruned",
                logging.INFO,
                topic=self._topic,
                requested=requested,
                first_available=pruned + 1,
            )

    async def _follow_live(self, high_water: int) -> None:
        live = self._live
        assert live is not None
        live.live = True
        while not self._stopping():
            records = live.drain()
            skipped = live.take_skipped()
            if skipped is not None:
                self._out += frames.notifications_skipped(
                    self._topic, skipped.count, skipped.first, skipped.last
                )
                self._metrics.notifications_skipped(skipped.count)
            self._emit(frames.LIVE, (record for record in records if record.sequence > high_water))
            if live.ended is not None and not self._out:
                self._control.stop("end_of_stream")
                return
            self._tick()
            if self._out:
                await self._flush()
                continue
            await self._control.sleep_until(self._wake_at())

    async def _close(self) -> None:
        reason = self._control.stop_reason
        if reason is not None and reason != "client_gone":
            resume = None
            if reason == "slow_consumer":
                first_seen = self._live.first_seen if self._live is not None else None
                resume = self._through + 1 if self._through else first_seen
            self._out += frames.connection_closing(
                self._topic, reason, self._control.request_id, resume
            )
        await self._flush()

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

    def _emit(self, event: bytes, records: Iterable[StoredNotification]) -> None:
        accepts = self._filter.accepts
        sent = 0
        for record in records:
            if not accepts(record):
                continue
            try:
                self._out += frames.frame(event, self._renderer.render(record))
                self._through = record.sequence
                sent += 1
            except CloudEventError as exc:
                self._out += frames.cloudevent_failed(
                    _display(record.topic), record.sequence, str(exc), self._control.request_id
                )
                self._metrics.stream_error()
        self._metrics.events_sent(sent)

    async def _flush(self) -> None:
        if self._out and self._send is not None:
            chunk = bytes(self._out)
            self._out.clear()
            await self._send({"type": "http.response.body", "body": chunk, "more_body": True})

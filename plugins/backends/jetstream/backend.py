"""The production backend: NATS JetStream through nats-py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from nats.aio.client import Client
from nats.errors import (
    ConnectionClosedError,
    NoServersError,
    OutboundBufferLimitError,
    StaleConnectionError,
)
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from aviso_builtins.backends.jetstream.embedded import EmbeddedNatsServer
from aviso_builtins.backends.jetstream.live import LiveFeeds
from aviso_builtins.backends.jetstream.messages import filter_subject, read_stored
from aviso_builtins.backends.jetstream.options import (
    OPTIONS_SCHEMA,
    JetStreamOptions,
    OptionRefused,
    parse_options,
    redacted,
    split_servers,
)
from aviso_builtins.backends.jetstream.publisher import (
    PublishingClient,
    acknowledged_sequence,
    dropped_as_duplicate,
    message_headers,
    sent_metadata,
)
from aviso_builtins.backends.jetstream.replay import HistoryReaders
from aviso_builtins.backends.jetstream.state import KeyValueBuckets, bucket_name
from aviso_builtins.backends.jetstream.streams import StreamKeeper, stream_name
from aviso_plugins._shared.idempotency import RememberedIds
from aviso_plugins._shared.literals import parse_duration
from aviso_plugins.state import SharedState
from aviso_plugins.storage import notification_fingerprint
from aviso_plugins.topics import TopicPattern, decode_token
from aviso_plugins.types import (
    MESSAGE_ID_METADATA,
    BackendCapabilities,
    BackendContext,
    Batch,
    ConfigurationProblem,
    LiveSink,
    MessageIdNotRetained,
    MessageIdReused,
    StartCursor,
    StorageBackend,
    StoredNotification,
    Subscription,
    UnknownStream,
    publishing_writer,
)

logger = logging.getLogger("aviso.jetstream")

# Only a lost connection is worth retrying a publish for; anything else (no stream, ack
# timeout, permissions) fails the notify at once.
_TRANSIENT = (ConnectionClosedError, OutboundBufferLimitError, StaleConnectionError)
_NO_MESSAGE = (10037, 10043, 10057)
_NO_STREAM = 10059
_MAX_RENEWAL_DELAY = 30.0
"""Longest pause between attempts at a new client (longer only if reconnect_delay_ms is)."""
_READY_TIMEOUT = 1.0
_SUPERVISION_SECONDS = 0.5
_SHUTDOWN_STEP_SECONDS = 5.0
"""Bound on each step of a shutdown (closing replay consumers, draining, closing)."""
_KEYED_ACK_TIMEOUT = 1.0
"""Seconds a publish with a message id waits for its acknowledgement before it is re-sent."""
_ACK_TIMEOUT = 5.0
"""Seconds any other publish waits for its acknowledgement (nats-py's JetStream default)."""
_STATE_STREAMS = "KV_" + bucket_name("x")[:-1]
"""How the streams behind the shared-state buckets are named."""
_SERVER_DUPLICATE_WINDOW = 120
"""nats-server's default duplicate window, in seconds."""
SEEN_IDS = 100_000
SEEN_IDS_PER_WRITER = 10_000
"""Bounds of the message ids one instance remembers to refuse a re-use for another
notification (the in-memory backend's defaults)."""


class BackendUnavailable(RuntimeError):
    """NATS cannot be reached right now."""


class RequestLost(RuntimeError):
    """The connection closed while a request awaited its answer. Not retried: the request
    may be the very one the server refused (retrying it would drop the next connection)."""


def _fingerprint_window(options: JetStreamOptions, context: BackendContext) -> float:
    """How long JetStream surely remembers a message id: the configured window (else the
    server's default), never longer than a retention that caps it, so that an id JetStream
    has forgotten (a new notification there) is never refused here."""
    windows = [options.duplicate_window_seconds or _SERVER_DUPLICATE_WINDOW]
    if options.retention_seconds:
        windows.append(options.retention_seconds)
    for policy in context.storage_policies.values():
        retention = policy.get("retention_time")
        if isinstance(retention, str):
            windows.append(parse_duration(retention))
    # A second less: this instance starts counting at the acknowledgement, a little after
    # the broker stored the message.
    return float(max(min(windows) - 1, 1))


class JetStreamBackend(StorageBackend):
    kind: ClassVar[str] = "jetstream"
    capabilities: ClassVar[BackendCapabilities] = BackendCapabilities(
        retention_time=True,
        max_messages=True,
        max_size=True,
        allow_duplicates=True,
        compression=True,
    )
    shared_between_processes: ClassVar[bool] = True
    options_schema: ClassVar[Mapping[str, Any]] = OPTIONS_SCHEMA

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        try:
            parse_options(options, environ={})
        except OptionRefused as exc:
            raise ConfigurationProblem(
                ("notification_backend", cls.kind, exc.key), exc.reason
            ) from exc

    def __init__(self, context: BackendContext) -> None:
        super().__init__(context)
        self.options = parse_options(context.options)
        self._embedded = (
            EmbeddedNatsServer(
                self.options.embedded_store_dir, self.options.token, self.options.embedded_port
            )
            if self.options.embedded_store_dir
            else None
        )
        self._nc: PublishingClient | None = None
        self._js: JetStreamContext | None = None
        self._keeper: StreamKeeper | None = None
        self._live: LiveFeeds | None = None
        self._history: HistoryReaders | None = None
        self._buckets = KeyValueBuckets(self.options.storage_type, self.options.replicas)
        self._closing = False
        self._url = self.options.nats_url
        self._renewal: asyncio.Task[None] | None = None
        self._lost_for_good: str | None = None
        """Why the connection ended as configured; ``None`` while it is kept alive."""
        self._probe: asyncio.Future[bool] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        # JetStream drops a re-send without comparing it; the stored message is read back to
        # compare. What this instance stored under each message id lets it refuse one that
        # differs without asking the broker (a fast path: the broker's answer is the same).
        self._seen_ids = RememberedIds(
            _fingerprint_window(self.options, context),
            SEEN_IDS,
            SEEN_IDS_PER_WRITER,
            context.metrics.message_ids_evicted_early,
        )

    # -- connection --------------------------------------------------------------------------

    async def start(self) -> None:
        url = self.options.nats_url
        if self._embedded is not None:
            await self._embedded.start()
            url = self._embedded.url
        self._url = url
        self._install(await self._connect(url))
        self._supervisor = asyncio.get_running_loop().create_task(self._supervise())

    def _install(self, client: PublishingClient) -> None:
        """Make ``client`` the connection everything uses; stream and replay state of an
        earlier client is dropped with it (its streams are ensured again on first use)."""
        options = self.options
        self._nc = client
        self._js = client.jetstream()
        self._keeper = StreamKeeper(self._js, options, self.context.storage_policies)
        self._history = HistoryReaders(client, self._js)
        self._buckets.use(self._js)
        if self._live is None:
            self._live = LiveFeeds(
                client,
                self._js,
                self._keeper,
                options.subscription_attempts,
                options.publish_retry_base_delay_ms / 1000,
            )

    async def _connect(self, url: str) -> PublishingClient:
        """``retry_attempts`` connection attempts, each one TCP connect bounded by
        ``timeout_seconds``."""
        options = self.options
        failure: Exception | None = None
        for attempt in range(1, options.retry_attempts + 1):
            try:
                return await self._open_client(url)
            except Exception as exc:
                failure = exc
                logger.warning(
                    "NATS connection attempt %d/%d to %s failed: %s",
                    attempt,
                    options.retry_attempts,
                    redacted(url),
                    _connect_failure(exc, options.timeout_seconds),
                )
                if attempt < options.retry_attempts:
                    await asyncio.sleep(options.reconnect_delay_ms / 1000)
        raise BackendUnavailable(
            f"could not connect to NATS at {redacted(url)} after "
            f"{options.retry_attempts} attempts: "
            f"{_connect_failure(failure, options.timeout_seconds)}"
        )

    async def _open_client(self, url: str) -> PublishingClient:
        """One connection attempt. The reconnect settings are applied only once connected:
        given to the first connect, nats-py would retry inside the attempt (forever with
        unlimited reconnects)."""
        options = self.options
        client = PublishingClient()

        async def closed() -> None:
            await self._on_closed(client)

        try:
            await asyncio.wait_for(
                client.connect(
                    servers=split_servers(url),
                    token=options.token,
                    connect_timeout=options.timeout_seconds,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                    closed_cb=closed,
                ),
                options.timeout_seconds,
            )
            await client.listen_for_acks()
        except BaseException:
            await _close_quietly(client)
            raise
        client.options["allow_reconnect"] = options.enable_auto_reconnect
        # nats-py: -1 = unlimited, n > 0 = give up after n failed attempts.
        client.options["max_reconnect_attempts"] = options.max_reconnect_attempts or -1
        client.options["reconnect_time_wait"] = options.reconnect_delay_ms / 1000
        return client

    async def _on_error(self, exc: Exception) -> None:
        # Also called for each failed reconnect attempt, whose exception (a timeout) may
        # have no text: its type is always written.
        text = str(exc)
        logger.warning(
            "NATS error: %s", f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        )

    async def _on_disconnected(self) -> None:
        if not self._closing:
            logger.warning("NATS connection lost")

    async def _on_reconnected(self) -> None:
        logger.info("NATS connection restored")
        if self._history is not None:
            # A restarted server lost the replay consumers (they are in memory): the next
            # page of each replay opens a new one from its cursor.
            self._history.forget_all()

    async def _on_closed(self, client: PublishingClient) -> None:
        self._handle_closed(client)

    async def _supervise(self) -> None:
        """Notice a client nats-py closed without calling back: its close can fail half-way
        (e.g. flushing to a socket the server already dropped), which leaves the client
        closed with no callback ever coming."""
        while not self._closing:
            await asyncio.sleep(_SUPERVISION_SECONDS)
            self._check_closed()

    def _check_closed(self) -> None:
        if self._nc is not None and self._nc.is_closed:
            self._handle_closed(self._nc)

    def _handle_closed(self, client: PublishingClient) -> None:
        """nats-py closed ``client`` for good: after a protocol error (a request the server
        refused, such as a subject over its control-line limit), a refused reconnect, or
        when the configured reconnect attempts ran out. Unless the operator asked for that
        ending (a positive ``max_reconnect_attempts`` used up, or
        ``enable_auto_reconnect: false``), a new client takes over. Idempotent."""
        _fail_requests_in_flight(client)
        if self._closing or client is not self._nc or self._lost_for_good is not None:
            return
        if self._renewal is not None and not self._renewal.done():
            return  # the renewal in progress notices that its client closed
        reason = self._final_loss(client)
        if reason is not None:
            self._give_up(reason)
            return
        logger.warning(
            "NATS closed the connection (%s); opening a new one",
            client.last_error or "no error given",
        )
        self._renewal = asyncio.get_running_loop().create_task(self._renew())

    def _give_up(self, reason: str) -> None:
        self._lost_for_good = reason
        logger.error("NATS connection closed for good: %s", reason)
        if self._live is not None:
            self._live.end_all("NATS connection closed")

    def _final_loss(self, client: Client) -> str | None:
        """Why ``client``'s loss is the configured end of the connection, if it is."""
        options = self.options
        if not options.enable_auto_reconnect:
            return "automatic reconnection is disabled (enable_auto_reconnect: false)"
        if options.max_reconnect_attempts and isinstance(client.last_error, NoServersError):
            return f"{options.max_reconnect_attempts} reconnect attempts failed"
        return None

    async def _renew(self) -> None:
        """Open a new client (backing off between attempts, bounded by a positive
        ``max_reconnect_attempts``), then move the live feeds onto it."""
        limit = self.options.max_reconnect_attempts
        attempt = 0
        while not self._closing:
            attempt += 1
            try:
                client = await self._open_client(self._url)
            except Exception as exc:
                logger.warning(
                    "new NATS connection to %s failed (attempt %d): %s",
                    redacted(self._url),
                    attempt,
                    exc or type(exc).__name__,
                )
                if limit and attempt >= limit:
                    self._give_up(f"{limit} attempts at a new connection failed")
                    return
                await asyncio.sleep(self._renewal_delay(attempt))
                continue
            if self._closing:
                await _close_quietly(client)
                return
            self._install(client)
            if await self._resume_feeds(client):
                logger.info("new NATS connection established")
                return
            # Closed again before every feed moved (e.g. another refused request).
            reason = self._final_loss(client)
            if reason is not None:
                self._give_up(reason)
                return
            attempt = 0

    async def _resume_feeds(self, client: Client) -> bool:
        """Move the live feeds onto ``client``, waiting out its own reconnects; ``False``
        if it closed first."""
        assert self._live is not None and self._js is not None and self._keeper is not None
        js, keeper = self._js, self._keeper
        while not await self._live.resume(client, js, keeper):
            if client.is_closed or self._closing:
                return False
            await asyncio.sleep(self.options.reconnect_delay_ms / 1000)
        return not client.is_closed

    def _renewal_delay(self, attempt: int) -> float:
        base = self.options.reconnect_delay_ms / 1000
        return min(base * 2.0 ** (attempt - 1), max(base, _MAX_RENEWAL_DELAY))

    async def ready(self) -> bool:
        """Connected, and JetStream answers an account-info request; the probe is shared by
        concurrent callers and bounded by one second."""
        if self._lost_for_good or self._nc is None or not self._nc.is_connected:
            self._check_closed()
            return False
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._probe_jetstream(self._nc))
        return await asyncio.shield(self._probe)

    async def _probe_jetstream(self, client: Client) -> bool:
        try:
            await client.jetstream(timeout=_READY_TIMEOUT).account_info()
        except Exception as exc:
            logger.info("JetStream not ready: %s", exc or type(exc).__name__)
            return False
        return True

    def _require(self) -> tuple[JetStreamContext, StreamKeeper]:
        _, keeper = self._require_publisher()
        assert self._js is not None
        return self._js, keeper

    def _require_publisher(self) -> tuple[PublishingClient, StreamKeeper]:
        client, keeper = self._nc, self._keeper
        if self._lost_for_good is not None:
            raise BackendUnavailable(f"NATS connection closed for good: {self._lost_for_good}")
        if client is None or keeper is None:
            raise BackendUnavailable("JetStream backend is not started")
        if not client.is_connected:
            self._check_closed()
            raise BackendUnavailable("NATS connection is down")
        return client, keeper

    async def shared_state(
        self, bucket: str, ttl_seconds: float | None = None
    ) -> SharedState | None:
        """A JetStream key-value bucket (created on first use, with the stream options'
        storage type and replicas)."""
        return self._buckets.state(bucket, ttl_seconds, lambda: self._require()[0])

    async def shutdown(self) -> None:
        self._closing = True
        for task in (self._renewal, self._supervisor):
            if task is not None:
                task.cancel()
        # Each step bounded: with the server gone, nats-py may wait on a reconnect forever.
        if self._history is not None:
            try:
                await asyncio.wait_for(self._history.close_all(), _SHUTDOWN_STEP_SECONDS)
            except TimeoutError:
                logger.warning("replay consumers not closed in time (they expire on their own)")
        if self._nc is not None and not self._nc.is_closed:
            try:
                await asyncio.wait_for(self._nc.drain(), _SHUTDOWN_STEP_SECONDS)
            except Exception as exc:
                logger.warning("NATS drain failed: %s", exc or type(exc).__name__)
                try:
                    await asyncio.wait_for(self._nc.close(), _SHUTDOWN_STEP_SECONDS)
                except Exception as close_exc:
                    logger.warning("NATS close failed: %s", close_exc or type(close_exc).__name__)
        if self._embedded is not None:
            await self._embedded.stop()

    # -- storage contract ----------------------------------------------------------------------

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        base = decode_token(topic.split(".", 1)[0])
        message_id = metadata.get(MESSAGE_ID_METADATA)
        if message_id is None:
            return (await self._publish(base, topic, payload, metadata))[0]
        stream = base.lower()
        # What the broker will hold: the headers as sent (stripped, no CR/LF), so that the
        # fingerprint of a stored message read back compares equal.
        sent = sent_metadata(metadata)
        fingerprint = notification_fingerprint(topic, payload, sent)
        seen = self._seen_ids.get(stream, message_id, time.monotonic())
        if seen is not None and seen.fingerprint != fingerprint:
            # This instance stored another notification under the id: the broker would
            # drop this one, so it is not even sent.
            raise MessageIdReused(message_id)
        if seen is None and self.options.idempotency_index:
            retained = await self._retained_under(
                base, topic, sent.get(MESSAGE_ID_METADATA, message_id), fingerprint
            )
            if retained is not None:
                return retained
        record, duplicate = await self._publish(base, topic, payload, metadata)
        if duplicate:
            # Dropped as a re-send: acknowledged only if the message the broker keeps under
            # the id is this notification, whichever instance stored it.
            return await self._stored_under(base, record, message_id, fingerprint)
        self._seen_ids.remember(
            stream, message_id, publishing_writer(), record.sequence, fingerprint, time.monotonic()
        )
        return record

    async def _retained_under(
        self, base: str, topic: str, message_id: str, fingerprint: bytes
    ) -> StoredNotification | None:
        """The message retained on ``topic`` as a replayed record if it was stored under
        ``message_id`` and is this notification (``MessageIdReused`` if it is another);
        ``None`` if the newest message there has another id or none is retained.

        A stream keeps one message per subject (unless a schema allows duplicates), so the
        message a re-send's key stored, if still retained, is the newest on the re-send's
        own subject: one direct read finds it however long ago the duplicate window ended.
        Not remembered locally: JetStream's window is counted from the first publish, so a
        local entry counted from now could let a later re-send through to the broker.
        """
        client, _ = self._require_publisher()
        js, _ = self._require()
        name = stream_name(base)
        try:
            # A direct get through the acknowledgement inbox (the publish path's cost) tells
            # whether the newest message there has this id; only then is it read in full,
            # its headers exactly as stored, to compare.
            newest = await client.last_on_subject(name, topic, _ACK_TIMEOUT)
            if newest is None or (newest.headers or {}).get(MESSAGE_ID_METADATA) != message_id:
                return None
        except NoStreamResponseError:
            pass  # no stream yet, or one not (yet) allowing direct gets: read it in full
        try:
            stored = await js.get_last_msg(name, topic)
        except NotFoundError:
            return None
        except APIError as exc:
            if exc.err_code in (*_NO_MESSAGE, _NO_STREAM):
                return None
            raise
        read = read_stored(stored)
        if read is None or read[2].get(MESSAGE_ID_METADATA) != message_id:
            return None
        if notification_fingerprint(*read) != fingerprint:
            raise MessageIdReused(message_id)
        topic, payload, metadata = read
        assert stored.seq is not None
        now = time.time_ns()
        return StoredNotification(stored.seq, topic, payload, now, metadata, replayed=True)

    async def _stored_under(
        self, base: str, dropped: StoredNotification, message_id: str, fingerprint: bytes
    ) -> StoredNotification:
        """The stored message whose sequence the broker answered a re-send with, as a
        replayed record if it is the same notification; raise otherwise."""
        js, _ = self._require()
        try:
            stored = await js.get_msg(stream_name(base), dropped.sequence)
        except NotFoundError as exc:
            raise MessageIdNotRetained(message_id) from exc
        except APIError as exc:
            if exc.err_code in _NO_MESSAGE:
                raise MessageIdNotRetained(message_id) from exc
            raise
        read = read_stored(stored)
        if read is None or notification_fingerprint(*read) != fingerprint:
            raise MessageIdReused(message_id)
        topic, payload, metadata = read
        return StoredNotification(
            dropped.sequence, topic, payload, time.time_ns(), metadata, replayed=True
        )

    async def _publish(
        self, base: str, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> tuple[StoredNotification, bool]:
        """Store one notification; also whether JetStream dropped it as a re-send."""
        options = self.options
        # With a message id JetStream drops a re-send, so an unanswered publish may be sent
        # again: after a short wait, which bounds a cluster failover (a stream without a
        # leader drops what it is sent) to the election rather than to the timeouts.
        keyed = MESSAGE_ID_METADATA in metadata
        for attempt in range(1, options.publish_retry_attempts + 1):
            delay = options.publish_retry_base_delay_ms * 2 ** (attempt - 1) / 1000
            try:
                client, keeper = self._require_publisher()
                name = keeper.confirmed(base) or await keeper.ensure_within(base, delay)
                reply = await client.publish_for_ack(
                    topic,
                    payload.encode(),
                    message_headers(metadata, name),
                    _KEYED_ACK_TIMEOUT if keyed else _ACK_TIMEOUT,
                )
                sequence = acknowledged_sequence(reply)
                # The record's time is local; deliveries carry the broker's timestamp.
                record = StoredNotification(sequence, topic, payload, time.time_ns(), metadata)
                return record, dropped_as_duplicate(reply)
            except NoStreamResponseError:
                # Deleted behind our back (the next ensure recreates it), or a cluster is
                # electing the stream's leader: nothing was stored, so try again.
                keeper.forget(base)
                if attempt == options.publish_retry_attempts:
                    raise
            except (*_TRANSIENT, BackendUnavailable):
                if attempt == options.publish_retry_attempts:
                    raise
            except (TimeoutError, RequestLost):  # nats-py's timeout is a TimeoutError
                # Perhaps stored: only a re-send JetStream recognises is safe.
                if not keyed or attempt == options.publish_retry_attempts:
                    raise
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        _, keeper = self._require()
        assert pattern.base is not None and self._history is not None
        try:
            name = await keeper.ensure(pattern.base)
            page = await self._history.read(name, filter_subject(pattern), start, limit)
        except NotFoundError:
            keeper.forget(pattern.base)  # deleted behind our back: recreate it once
            name = await keeper.ensure(pattern.base)
            page = await self._history.read(name, filter_subject(pattern), start, limit)
        if not page.records:
            return Batch(messages=[], has_more=False, next_sequence=None)
        return Batch(
            messages=[record for record in page.records if pattern.matches(record.topic)],
            has_more=page.more,
            next_sequence=page.records[-1].sequence + 1,
        )

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        _, keeper = self._require()
        assert self._live is not None and pattern.base is not None
        try:
            return await self._live.join(pattern, sink)
        except NotFoundError:
            keeper.forget(pattern.base)  # deleted behind our back: recreate it once
            return await self._live.join(pattern, sink)

    async def history_bound(self, pattern: TopicPattern) -> int:
        js, keeper = self._require()
        assert pattern.base is not None
        try:
            name = await keeper.ensure(pattern.base)
            return (await js.stream_info(name)).state.last_seq
        except NotFoundError:
            keeper.forget(pattern.base)  # deleted behind our back: recreate it once
            return (await js.stream_info(await keeper.ensure(pattern.base))).state.last_seq

    async def first_sequence_after(self, pattern: TopicPattern, time_ns: int) -> int | None:
        # Answered for the whole stream (the consumer's start-time search is unfiltered).
        _, keeper = self._require()
        assert pattern.base is not None and self._history is not None
        return await self._history.first_after(await keeper.ensure(pattern.base), time_ns)

    async def pruned_through(self, stream: str) -> int:
        # Messages below the stream's first sequence are gone; interior removals (the
        # one-per-subject limit, single deletes) are not visible here and not reported.
        js, keeper = self._require()
        state = (await js.stream_info(await keeper.ensure(stream))).state
        return state.first_seq - 1

    async def wipe_stream(self, name: str) -> None:
        js, _ = self._require()
        try:
            await js.purge_stream(stream_name(name))
        except NotFoundError as exc:
            raise UnknownStream(name) from exc

    async def wipe_all(self) -> None:
        js, _ = self._require()
        for info in await js.streams_info():
            name = info.config.name
            if name is None or name.startswith(_STATE_STREAMS):
                # Unnamed: never listed by the server. Shared state (subscriptions,
                # positions) is not notifications.
                continue
            try:
                await js.purge_stream(name)
            except Exception as exc:
                logger.warning("purging stream %s failed: %s", name, exc)

    async def delete_message(self, stream: str, sequence: int) -> bool:
        js, _ = self._require()
        try:
            return await js.delete_msg(stream_name(stream), sequence)
        except NotFoundError:
            return False
        except APIError as exc:
            if exc.err_code in (*_NO_MESSAGE, _NO_STREAM):
                return False
            raise


def _connect_failure(exc: Exception | None, timeout_seconds: float) -> str:
    """Why a connection attempt failed; a timeout (a TimeoutError with no text) says which
    limit it ran into, so that the startup error is never empty."""
    if exc is None or (isinstance(exc, TimeoutError) and not str(exc)):
        return f"no answer within {timeout_seconds} s (jetstream.timeout_seconds)"
    return str(exc) or type(exc).__name__


def _fail_requests_in_flight(client: PublishingClient) -> None:
    """nats-py leaves the requests of a closed client waiting for their timeout although no
    answer can come any more: fail them now."""
    client.fail_requests(RequestLost("the NATS connection closed before the answer"))


async def _close_quietly(client: Client) -> None:
    try:
        await client.close()
    except Exception as exc:  # it never connected; nothing to clean up beyond this
        logger.debug("closing a failed NATS client: %s", exc)

"""Live delivery: one ordered JetStream consumer per stream per process, fanned out locally.

Each watcher does not get its own consumer: one ordered push consumer per topic base, from
the newest stored message on (which it drops: it precedes every watch), feeds every local
watcher of that base, and the same record object is handed to each of them, so the
CloudEvent is rendered once. An ordered consumer resumes after a reconnect exactly after the
last stream sequence it delivered, so watches survive a NATS outage without gap or
duplicate. When the backend has to replace its NATS client (the
old one was closed for good), :meth:`LiveFeeds.resume` recreates every feed's consumer on the
new one, starting right after the last sequence the feed delivered; each feed also drops any
record at or below that sequence, so a consumer restarted too early never duplicates.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from aviso_builtins.backends.jetstream.messages import to_record
from aviso_builtins.backends.jetstream.streams import StreamKeeper
from aviso_plugins._shared.fanout import SubscriberIndex
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import LiveSink

logger = logging.getLogger("aviso.jetstream")

_HEARTBEAT_SECONDS = 1.0
"""nats-py restarts an ordered consumer after two missed heartbeats: a consumer lost with
its server (a cluster node killed) is replaced after 2 s instead of nats-py's default 10 s,
so the backlog it then delivers at once stays well inside a watch's live queue."""


class _Watcher:
    __slots__ = ("pattern", "sink")

    def __init__(self, pattern: TopicPattern, sink: LiveSink) -> None:
        self.pattern = pattern
        self.sink = sink


class _Feed:
    """The shared consumer of one base and the local watchers it feeds."""

    def __init__(self) -> None:
        self.watchers: set[_Watcher] = set()
        self.index: SubscriberIndex[_Watcher] = SubscriberIndex()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.subscription: JetStreamContext.PushSubscription | None = None
        self.js: JetStreamContext | None = None
        """The client context ``subscription`` belongs to."""
        self.last_sequence = 0
        """The highest stream sequence this feed has handed on (or skipped as unreadable),
        or the stream's last sequence when the feed began: where a new consumer resumes."""

    async def on_message(self, msg: Msg) -> None:
        try:
            sequence = msg.metadata.sequence.stream
            if sequence <= self.last_sequence:
                return  # redelivered by a consumer that restarted before this point
            self.last_sequence = sequence
            record = to_record(msg)
        except Exception as exc:  # an unreadable message is skipped, not fatal
            logger.warning("skipping unreadable message on %s: %s", msg.subject, exc)
            return
        # Each distinct pattern is matched once, however many watchers share it.
        for watcher in self.index.matching(record.topic):
            try:
                watcher.sink.deliver(record)
            except Exception:  # one broken watcher must not starve the others
                logger.exception("live delivery to a watcher failed")


class _LiveSubscription:
    def __init__(self, feeds: LiveFeeds, base: str, watcher: _Watcher) -> None:
        self._feeds = feeds
        self._base = base
        self._watcher = watcher

    async def close(self) -> None:
        await self._feeds.leave(self._base, self._watcher)


class LiveFeeds:
    def __init__(
        self,
        client: Client,
        js: JetStreamContext,
        keeper: StreamKeeper,
        attempts: int,
        retry_delay: float,
    ) -> None:
        self._client = client
        self._js = js
        self._keeper = keeper
        self._attempts = attempts
        """How often a feed's consumer creation is tried before the watch is refused."""
        self._retry_delay = retry_delay
        self._feeds: dict[str, _Feed] = {}

    async def join(self, pattern: TopicPattern, sink: LiveSink) -> _LiveSubscription:
        base = pattern.base
        assert base is not None, "aviso patterns always name their stream"
        feed = self._feeds.get(base)
        if feed is None:
            feed = self._feeds[base] = _Feed()
            try:
                await self._consume(base, feed, resume=False)
            except Exception as exc:
                del self._feeds[base]
                feed.ready.set_exception(exc)
                feed.ready.exception()  # retrieved: later joiners re-raise it themselves
                raise
            feed.ready.set_result(None)
        else:
            await asyncio.shield(feed.ready)
        watcher = _Watcher(pattern, sink)
        feed.watchers.add(watcher)
        feed.index.add(pattern, watcher)
        return _LiveSubscription(self, base, watcher)

    async def _consume(self, base: str, feed: _Feed, resume: bool) -> None:
        """Give ``feed`` a new ordered consumer: from the next stored message, or (``resume``)
        right after the last one it delivered. Tried ``attempts`` times: a stream deleted
        behind our back is recreated, a JetStream still recovering after a restart waited
        for; a connection that is down fails at once (the caller knows it is down)."""
        for attempt in range(1, self._attempts + 1):
            client, js = self._client, self._js
            try:
                name = await self._keeper.ensure(base)
                if not resume:
                    # Whatever is stored now precedes this feed: the floor a new consumer
                    # would resume from if the client is replaced before anything arrives.
                    stored = (await js.stream_info(name)).state.last_seq
                    feed.last_sequence = max(feed.last_sequence, stored)
                # nats-py restarts an ordered consumer that missed its heartbeats (its
                # server lost it) right after the last stream sequence it delivered, counting
                # from 0: a consumer that has delivered nothing would re-read the whole
                # stream. So each one starts with the newest message this feed already
                # handed on (or the stream's newest, for a new feed), which on_message drops.
                config = api.ConsumerConfig(
                    deliver_policy=api.DeliverPolicy.LAST, idle_heartbeat=_HEARTBEAT_SECONDS
                )
                if resume:
                    config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
                    config.opt_start_seq = max(feed.last_sequence, 1)
                feed.subscription = await js.subscribe(
                    f"{base}.>",
                    stream=name,
                    cb=feed.on_message,
                    ordered_consumer=True,
                    config=config,
                )
                feed.js = js
                return
            except NotFoundError:
                self._keeper.forget(base)  # deleted behind our back: recreate it
                if attempt == self._attempts:
                    raise
            except Exception as exc:
                if attempt == self._attempts or not client.is_connected:
                    raise
                logger.warning("live consumer for %s failed (attempt %d): %s", base, attempt, exc)
            await asyncio.sleep(self._retry_delay * 2 ** (attempt - 1))

    async def resume(self, client: Client, js: JetStreamContext, keeper: StreamKeeper) -> bool:
        """Continue every feed on a new NATS client (``client``, its context ``js``) where
        it stopped; a feed whose consumer cannot be recreated ends its watches. ``False`` when
        the new connection was lost meanwhile: the feeds not yet moved keep their watches,
        call again."""
        self._client = client
        self._js = js
        self._keeper = keeper
        for base, feed in tuple(self._feeds.items()):
            if feed.js is js or not feed.ready.done() or feed.ready.exception() is not None:
                continue  # already on this client, or its creation failed (joiners saw that)
            try:
                await self._consume(base, feed, resume=True)
                if self._feeds.get(base) is not feed and feed.subscription is not None:
                    await feed.subscription.unsubscribe()  # its last watcher left meanwhile
            except Exception as exc:
                if not client.is_connected:
                    return False
                logger.error("live feed of %s could not be resumed: %s", base, exc)
                if self._feeds.get(base) is feed:
                    del self._feeds[base]
                for watcher in tuple(feed.watchers):
                    watcher.sink.end("NATS consumer could not be recreated")
        return True

    async def leave(self, base: str, watcher: _Watcher) -> None:
        feed = self._feeds.get(base)
        if feed is None:
            return
        feed.watchers.discard(watcher)
        feed.index.discard(watcher.pattern, watcher)
        if not feed.watchers and feed.subscription is not None:
            del self._feeds[base]
            try:
                await feed.subscription.unsubscribe()
            except Exception as exc:  # the connection may already be gone
                logger.debug("unsubscribe of %s failed: %s", base, exc)

    def end_all(self, reason: str) -> None:
        """The connection is gone for good: every live stream must end."""
        for feed in self._feeds.values():
            for watcher in tuple(feed.watchers):
                watcher.sink.end(reason)

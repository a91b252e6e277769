"""Live delivery: one ordered JetStream consumer per stream per process, fanned out locally.

Each watcher does not get its own consumer: one ordered push consumer (deliver policy
*new*) per topic base feeds every local watcher of that base, and the same record object is
handed to each of them, so the CloudEvent is rendered once. An ordered consumer resumes
after a reconnect exactly after the last stream sequence it delivered, so watches survive a
NATS outage without gap or duplicate.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.msg import Msg
from nats.js import JetStreamContext, api

from aviso_builtins.backends.jetstream.messages import to_record
from aviso_builtins.backends.jetstream.streams import StreamKeeper
from aviso_plugins.fanout import SubscriberIndex
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import LiveSink

logger = logging.getLogger("aviso.jetstream")


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

    async def on_message(self, msg: Msg) -> None:
        try:
            record = to_record(msg)
        except Exception as exc:  # an unreadable message is skipped, not fatal
            logger.warning("skipping unreadable message on %s: %s", msg.subject, exc)
            return
        for watcher in self.index.candidates(record.topic):
            if watcher.pattern.matches(record.topic):
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
    def __init__(self, js: JetStreamContext, keeper: StreamKeeper) -> None:
        self._js = js
        self._keeper = keeper
        self._feeds: dict[str, _Feed] = {}

    async def join(self, pattern: TopicPattern, sink: LiveSink) -> _LiveSubscription:
        base = pattern.base
        assert base is not None, "aviso patterns always name their stream"
        feed = self._feeds.get(base)
        if feed is None:
            feed = self._feeds[base] = _Feed()
            try:
                name = await self._keeper.ensure(base)
                feed.subscription = await self._js.subscribe(
                    f"{pattern.tokens[0]}.>",
                    stream=name,
                    cb=feed.on_message,
                    ordered_consumer=True,
                    deliver_policy=api.DeliverPolicy.NEW,
                )
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

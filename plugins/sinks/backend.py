"""The ``backend`` sink: validate with the host's planner and publish straight to a store.

No HTTP hop: the caller hands over the host's validation (``SinkContext.planner``) and a
factory for the configured storage backend (``SinkContext.backend_factory``). A notification
that arrives already planned (``Notification.planned``) is published without validating it
a second time. Options
(text): ``concurrency`` (publishes in flight; default 64), ``retries`` (default 3),
``backoff_ms`` (first retry delay, doubled each time; default 100) and
``unavailable_after_seconds`` (default 5): a store that has not answered one notification
(connection included) within this long fails the task with :class:`SinkUnavailable`,
however many retries are left, so a job meeting a down store ends in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import ClassVar

from aviso_builtins.sinks.common import backoff_seconds, int_option, publish_all
from aviso_plugins import hookimpl
from aviso_plugins.types import (
    MESSAGE_ID_METADATA,
    MessageIdRefused,
    Notification,
    NotificationPlanner,
    Sink,
    SinkContext,
    SinkOutcome,
    SinkRejected,
    SinkUnavailable,
    StorageBackend,
)


class BackendSink(Sink):
    name: ClassVar[str] = "backend"

    def __init__(self, context: SinkContext) -> None:
        super().__init__(context)
        if context.planner is None or context.backend_factory is None:
            raise ValueError("the backend sink needs a planner and a backend factory")
        self.planner: NotificationPlanner = context.planner
        options = context.options
        self.concurrency = int_option(options, "concurrency", 64, 1)
        self.retries = int_option(options, "retries", 3, 0)
        self.backoff_ms = int_option(options, "backoff_ms", 100, 0)
        self.unavailable_after = int_option(options, "unavailable_after_seconds", 5, 1)
        self._backend: StorageBackend | None = None

    async def start(self) -> None:
        assert self.context.backend_factory is not None
        backend = self.context.backend_factory()
        try:
            async with asyncio.timeout(self.unavailable_after):
                await backend.start()
        except Exception as exc:
            await backend.shutdown()
            reason = "no answer" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}"
            if str(exc):
                reason += f": {exc}"
            raise SinkUnavailable(
                f"the {backend.kind} backend did not start within {self.unavailable_after} s "
                f"(sink.unavailable_after_seconds): {reason}"
            ) from exc
        self._backend = backend

    async def close(self) -> None:
        if self._backend is not None:
            await self._backend.shutdown()
            self._backend = None

    async def publish_batch(self, notifications: Sequence[Notification]) -> list[SinkOutcome]:
        return await publish_all(notifications, self.concurrency, self._publish_one)

    async def _publish_one(self, notification: Notification) -> SinkOutcome:
        assert self._backend is not None, "start() was not called"
        planned = notification.planned
        if planned is None:
            try:
                planned = self.planner.plan(
                    notification.event_type, notification.identifier, notification.payload
                )
            except SinkRejected as exc:
                return SinkOutcome(error=exc)
        metadata = planned.metadata
        if notification.message_id:
            metadata = {**metadata, MESSAGE_ID_METADATA: notification.message_id}
        failure = ""
        attempts = 0
        # Every attempt and pause together: a re-send after a cancelled publish is safe
        # only because the row's message id makes it one (a row without one has none).
        try:
            async with asyncio.timeout(self.unavailable_after):
                for attempt in range(self.retries + 1):
                    attempts = attempt + 1
                    if attempt:
                        await asyncio.sleep(backoff_seconds(self.backoff_ms, attempt - 1))
                    try:
                        record = await self._backend.publish(
                            planned.topic, planned.payload, metadata
                        )
                    except MessageIdRefused as exc:
                        # The row's key already stored another row, or one no longer
                        # retained: a rejection with the API's code, as over HTTP.
                        error = SinkRejected(exc.code, str(exc))
                        return SinkOutcome(retries=attempt, error=error)
                    except Exception as exc:  # any storage failure: the API's 500
                        failure = f"{type(exc).__name__}: {exc}"
                        continue
                    return SinkOutcome(retries=attempt, already_stored=record.replayed)
        except TimeoutError:
            failure = f"no answer within {self.unavailable_after} s ({failure or 'waiting'})"
        raise SinkUnavailable(
            f"publishing to the {self._backend.kind} backend failed after "
            f"{attempts} attempts: {failure}"
        )


@hookimpl
def aviso_sinks() -> list[type[Sink]]:
    return [BackendSink]

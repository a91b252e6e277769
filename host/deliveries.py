"""Pushes subscriptions' notifications through the plugins' delivery kinds.

One task per push subscription reads the stored notifications after the subscription's
cursor, in sequence order, and hands each to its delivery kind, one at a time: a retry waits
out the kind's schedule before the next notification of that subscription is tried, and
after the last attempt the notification is dead-lettered. The cursor moves when a
notification is delivered or dead-lettered. As with notification consumers, the live feed
only wakes the task and every notification is read from history, so a subscription whose
endpoint is slow or dead costs its lag, never a queue. Attempts in flight across all
subscriptions are capped by one semaphore, so a hanging endpoint holds one slot, never the
others' turn.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aviso_host.cloudevents import CloudEventError, CloudEventRenderer
from aviso_host.config.plugin_options import fill_defaults
from aviso_host.config.settings import Settings
from aviso_host.consumers import Wakeup, consumed_notification
from aviso_host.cursors import now_whole_seconds
from aviso_host.errors import log_failure
from aviso_host.filtering import StreamFilter
from aviso_host.logs import log_event
from aviso_host.metrics import DELIVERY_OUTCOMES, Metrics
from aviso_host.plugins import PluginRegistry
from aviso_host.subscriptions import ACTIVE, DISABLED, SubscriptionEntry
from aviso_plugins.types import (
    ConsumedNotification,
    DeliveryAttempt,
    DeliveryKind,
    DeliveryResult,
    StartCursor,
    StorageBackend,
    StoredNotification,
)

DEAD_LETTERS_KEPT = 1_000
"""Dead letters kept per subscription; beyond it the oldest is forgotten (and counted). A
dead letter holds a sequence, not the notification (a redrive reads it from the store): at
most a few hundred bytes each."""
MAX_CONCURRENT_DELIVERIES = 64
"""Delivery attempts in flight at once across every subscription (one per subscription)."""
BATCH_SIZE = 64
"""Notifications read per history page."""
RETRY_SECONDS = 1.0
"""Wait after a history page or a live subscription failed, before trying again."""
ERROR_CHARACTERS = 300
"""The most of a delivery kind's error text kept (in the state and each dead letter)."""
OUTCOMES = frozenset({"delivered", "retry", "gone"})


@dataclass(frozen=True, slots=True)
class DeadLetter:
    sequence: int
    attempts: int
    error: str | None
    dead_lettered_at: str

    def view(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "attempts": self.attempts,
            "error": self.error,
            "dead_lettered_at": self.dead_lettered_at,
        }


def _by_sequence(letter: DeadLetter) -> int:
    return letter.sequence


@dataclass(slots=True, eq=False)
class PushState:
    """A push subscription's delivery: its kind, what ``prepare`` stored, and its counts."""

    kind: DeliveryKind
    stored: Mapping[str, Any]
    stream_filter: StreamFilter
    status: str = ACTIVE
    delivered: int = 0
    retrying: int = 0
    """Notifications waiting for a retry (0 or 1: one at a time per subscription)."""
    dead_lettered: int = 0
    """Notifications ever dead-lettered (redriven ones included)."""
    dead_letters_dropped: int = 0
    """Dead letters forgotten because more than ``DEAD_LETTERS_KEPT`` were kept."""
    last_error: dict[str, Any] | None = None
    dead_letters: deque[DeadLetter] = field(default_factory=lambda: deque(maxlen=DEAD_LETTERS_KEPT))
    redrive: list[DeadLetter] = field(default_factory=list)
    """Dead letters to deliver again, by sequence (at most ``DEAD_LETTERS_KEPT``)."""
    holding_ns: int | None = None
    """The storage time of the notification being delivered or waiting for a retry (the
    oldest this subscription has not delivered, a redriven dead letter aside): what the lag
    gauge reads at a scrape, with no read of the history."""
    wakeup: Wakeup | None = None
    task: asyncio.Task[None] | None = None

    def public_view(self) -> Mapping[str, Any]:
        return self.kind.public_view(self.stored)

    def counts(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "delivered": self.delivered,
            "retrying": self.retrying,
            "dead_lettered": self.dead_lettered,
            "last_error": self.last_error,
        }

    def dead_letter(self, letter: DeadLetter) -> None:
        self._keep(letter)
        self.dead_lettered += 1

    def _keep(self, letter: DeadLetter) -> None:
        if len(self.dead_letters) == DEAD_LETTERS_KEPT:
            self.dead_letters_dropped += 1
        self.dead_letters.append(letter)

    def take_dead_letters(self) -> int:
        """Queue every kept dead letter for delivery again; return how many. A disabled
        subscription delivers nothing: its dead letters stay where they are."""
        if self.status != ACTIVE:
            return 0
        letters = list(self.dead_letters)
        self.dead_letters.clear()
        queued = {letter.sequence for letter in self.redrive}
        for letter in letters:
            if letter.sequence not in queued:
                bisect.insort(self.redrive, letter, key=_by_sequence)
        if self.wakeup is not None:
            self.wakeup.event.set()
        return len(letters)

    def disable(self, current: DeadLetter | None) -> None:
        """The receiver is gone: deliver nothing more; the dead letter being redriven and
        those still queued go back to the dead letters."""
        self.status = DISABLED
        self.retrying = 0
        for letter in (*(() if current is None else (current,)), *self.redrive):
            self._keep(letter)
        self.redrive.clear()


def kind_options(settings: Settings, cls: type[DeliveryKind]) -> dict[str, Any]:
    """``subscriptions.<kind>`` over its schema's defaults (checked with the document)."""
    section = settings.document.get("subscriptions", {}).get(cls.kind, {})
    given = dict(section) if isinstance(section, Mapping) else {}
    return dict(fill_defaults(given, cls.options_schema))


class DeliveryRunner:
    """Constructs the delivery kinds, and runs one task per active push subscription."""

    def __init__(
        self,
        settings: Settings,
        registry: PluginRegistry,
        backend: StorageBackend,
        renderer: CloudEventRenderer,
        metrics: Metrics,
    ) -> None:
        self._backend = backend
        self._renderer = renderer
        self._metrics = metrics
        self.kinds: dict[str, DeliveryKind] = {
            kind: cls(kind_options(settings, cls))
            for kind, cls in sorted(registry.delivery_kinds.items())
        }
        for kind in self.kinds:  # at 0 from startup, for dashboards' rates
            for outcome in DELIVERY_OUTCOMES:
                metrics.webhook_deliveries.labels(kind, outcome)
            metrics.webhook_latency.labels(kind)
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_DELIVERIES)
        self._tasks: set[asyncio.Task[None]] = set()
        self._started: list[DeliveryKind] = []

    async def start(self) -> None:
        try:
            for kind in self.kinds.values():
                await kind.start()
                self._started.append(kind)
        except BaseException:
            await self._close_kinds()
            raise

    async def close(self) -> None:
        for task in tuple(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self._close_kinds()

    async def _close_kinds(self) -> None:
        while self._started:
            kind = self._started.pop()
            try:
                await kind.close()
            except Exception as exc:
                log_failure("delivery.close_failed", "delivery kind close failed", exc)

    def begin(self, entry: SubscriptionEntry) -> None:
        """Start delivering ``entry`` (a push subscription just stored)."""
        push = entry.push
        assert push is not None
        task = asyncio.create_task(self._run(entry, push))
        push.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self, entry: SubscriptionEntry) -> None:
        """Stop delivering ``entry`` (deleted); an attempt in flight is abandoned."""
        if entry.push is not None and entry.push.task is not None:
            entry.push.task.cancel()

    async def _run(self, entry: SubscriptionEntry, push: PushState) -> None:
        """Subscribe first, then read: whatever is stored after a read found nothing has
        already set the wake-up."""
        pattern = push.stream_filter.pattern
        while push.status == ACTIVE:
            wakeup = push.wakeup = Wakeup()
            if push.redrive:
                wakeup.event.set()
            try:
                subscription = await self._backend.subscribe(pattern, wakeup)
            except Exception as exc:
                log_failure("delivery.subscribe_failed", "live subscription failed", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                await self._read(entry, push, wakeup)
            finally:
                await subscription.close()
            if push.status == ACTIVE:
                await asyncio.sleep(RETRY_SECONDS)  # the feed ended: the store may be down

    async def _read(self, entry: SubscriptionEntry, push: PushState, wakeup: Wakeup) -> None:
        """Until the live feed ends or the subscription is disabled."""
        pattern = push.stream_filter.pattern
        while not wakeup.ended and push.status == ACTIVE:
            wakeup.event.clear()
            if push.redrive:
                letter = push.redrive.pop(0)
                record = await self._record(push, letter)
                if record is not None:
                    await self._push(entry, push, record, letter)
                continue
            try:
                cursor = StartCursor(from_sequence=entry.next_sequence)
                batch = await self._backend.fetch_batch(pattern, cursor, BATCH_SIZE)
                selected = await push.stream_filter.select(batch.messages)
            except Exception as exc:
                log_failure("delivery.read_failed", "history page failed", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            for record in selected:
                await self._push(entry, push, record)
                if push.status != ACTIVE or push.redrive:
                    break
            else:
                if batch.has_more and batch.next_sequence is not None:
                    # Records examined without a match are passed over too.
                    self._move_cursor(entry, batch.next_sequence - 1)
                elif not batch.has_more:
                    await wakeup.event.wait()

    async def _record(self, push: PushState, letter: DeadLetter) -> StoredNotification | None:
        """The stored notification a dead letter names, if it is still retained."""
        sequence = letter.sequence
        try:
            batch = await self._backend.fetch_batch(
                push.stream_filter.pattern, StartCursor(from_sequence=sequence), 1
            )
        except Exception as exc:
            log_failure("delivery.read_failed", "history page failed", exc)
            await asyncio.sleep(RETRY_SECONDS)
            bisect.insort(push.redrive, letter, key=_by_sequence)
            return None
        if batch.messages and batch.messages[0].sequence == sequence:
            return batch.messages[0]
        log_event(
            "delivery.redrive_missing",
            "dead letter no longer stored: not redriven",
            logging.WARNING,
            sequence=sequence,
        )
        return None

    @staticmethod
    def _move_cursor(entry: SubscriptionEntry, sequence: int) -> None:
        entry.delivered_through(sequence)
        entry.acknowledge(sequence)

    async def _push(
        self,
        entry: SubscriptionEntry,
        push: PushState,
        record: StoredNotification,
        redriven: DeadLetter | None = None,
    ) -> None:
        """Deliver one notification (``redriven``: a dead letter's) with its retries; move
        the cursor past it unless the receiver is gone."""
        event_type = entry.definition["event_type"]
        try:
            notification = consumed_notification(self._renderer, event_type, record)
        except (CloudEventError, ValueError) as exc:
            log_event(
                "delivery.unreadable",
                f"notification passed over: {exc}",
                logging.WARNING,
                event_type=event_type,
                sequence=record.sequence,
            )
            self._move_cursor(entry, record.sequence)
            return
        push.holding_ns = record.time_ns
        try:
            await self._attempts(entry, push, record, notification, redriven)
        finally:
            push.holding_ns = None

    async def _attempts(
        self,
        entry: SubscriptionEntry,
        push: PushState,
        record: StoredNotification,
        notification: ConsumedNotification,
        redriven: DeadLetter | None,
    ) -> None:
        kind = push.kind
        delays = tuple(kind.retry_delays)
        counter = self._metrics.webhook_deliveries
        attempt = 1
        while True:
            result = await self._attempt(
                kind,
                DeliveryAttempt(entry.name, entry.owner, push.stored, notification, attempt),
            )
            counter.labels(kind.kind, result.outcome).inc()
            if result.outcome == "delivered":
                latency = max(0.0, time.time() - record.time_ns / 1e9)
                self._metrics.webhook_latency.labels(kind.kind).observe(latency)
                push.delivered += 1
                push.retrying = 0
                self._move_cursor(entry, record.sequence)
                return
            error = None if result.error is None else result.error[:ERROR_CHARACTERS]
            push.last_error = {
                "sequence": record.sequence,
                "attempt": attempt,
                "error": error,
                "at": now_whole_seconds(),
            }
            if result.outcome == "gone":
                push.disable(redriven)
                log_event(
                    "delivery.gone",
                    "the receiver asked for the subscription to stop: disabled",
                    subscription=entry.name,
                    sequence=record.sequence,
                )
                return
            if attempt > len(delays):
                push.retrying = 0
                push.dead_letter(DeadLetter(record.sequence, attempt, error, now_whole_seconds()))
                counter.labels(kind.kind, "dead_lettered").inc()
                self._move_cursor(entry, record.sequence)
                return
            push.retrying = 1
            await asyncio.sleep(delays[attempt - 1])
            attempt += 1

    async def _attempt(self, kind: DeliveryKind, attempt: DeliveryAttempt) -> DeliveryResult:
        async with self._slots:
            try:
                result = await kind.deliver(attempt)
            except Exception as exc:
                log_failure(
                    "delivery.failed",
                    "delivery kind failed",
                    exc,
                    kind=kind.kind,
                    sequence=attempt.notification.record.sequence,
                )
                return DeliveryResult("retry", "delivery failed")
        if result.outcome not in OUTCOMES:
            log_event(
                "delivery.bad_outcome",
                f"delivery kind answered an unknown outcome {result.outcome!r}: retried",
                logging.ERROR,
                kind=kind.kind,
            )
            return DeliveryResult("retry", "delivery failed")
        return result

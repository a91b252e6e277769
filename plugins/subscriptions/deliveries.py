"""Pushes subscriptions' notifications through the plugins' delivery kinds.

A push subscription with something to deliver has a task that reads the stored
notifications after the subscription's cursor, in sequence order, and hands each to its
delivery kind, one at a time: a retry waits out the kind's schedule before the next
notification of that subscription is tried, and after the last attempt the notification is
dead-lettered. The cursor moves when a notification is delivered or dead-lettered. The task
ends once it has caught up (nothing stored after the cursor, no retry waiting, no redrive),
so an idle subscription costs its key and no task: one live feed per subject pattern, shared
by every push subscription of the pattern, starts the task again when something is stored.
As with notification consumers, the feed only wakes and every notification is read from
history, so a subscription whose endpoint is slow or dead costs its lag, never a queue.
Attempts in flight across all subscriptions are capped by one semaphore, so a hanging
endpoint holds one slot, never the others' turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aviso_builtins.subscriptions.metrics import DeliveryMetrics
from aviso_builtins.subscriptions.store import (
    ACTIVE,
    DISABLED,
    FORBIDDEN,
    PULL,
    SHARDS,
    SubscriptionEntry,
    SubscriptionStore,
    generation_key,
    indexed_entry_key,
    now,
    push_index_prefix,
)
from aviso_plugins.leases import DEFAULT_LEASE_SECONDS, Lease, LeaseKeeper, holder_id
from aviso_plugins.service import (
    ApiRefusal,
    ServiceAccess,
    StreamSelection,
    Wakeup,
    log_event,
    log_failure,
)
from aviso_plugins.state import SharedState
from aviso_plugins.types import (
    AuthError,
    ConsumedNotification,
    DeliveryAttempt,
    DeliveryKind,
    DeliveryResult,
    StartCursor,
    StoredNotification,
    TopicPattern,
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
SCAN_SECONDS = 1.0
"""How often a shard's holder checks whether a push subscription of the shard was created,
deleted or redriven by another process."""
ADMISSION_SECONDS = 10.0
"""How long a push subscription delivers on one check of its owner's roles and authorisers
before checking them again."""


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

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> DeadLetter:
        return cls(
            document["sequence"],
            document["attempts"],
            document["error"],
            document["dead_lettered_at"],
        )


# -- the dead-letter document: ``letters`` (oldest first), ``redrive`` (by sequence), ``dropped``


def keep_letter(document: dict[str, Any], letter: DeadLetter) -> None:
    """Keep ``letter``; beyond ``DEAD_LETTERS_KEPT`` the oldest is forgotten (and counted)."""
    letters = document["letters"]
    letters.append(letter.view())
    if len(letters) > DEAD_LETTERS_KEPT:
        del letters[0]
        document["dropped"] += 1


def take_dead_letters(document: dict[str, Any]) -> int:
    """Queue every kept dead letter for delivery again (once each, by sequence); how many."""
    letters = document["letters"]
    queued = {letter["sequence"] for letter in document["redrive"]}
    for letter in letters:
        if letter["sequence"] not in queued:
            document["redrive"].append(letter)
    document["redrive"].sort(key=lambda letter: letter["sequence"])
    document["letters"] = []
    return len(letters)


def disable_letters(document: dict[str, Any], current: DeadLetter | None) -> None:
    """The receiver is gone: the dead letter being redriven (still queued until it is
    delivered) and those queued after it go back to the dead letters."""
    queued = document["redrive"]
    if current is not None and all(item["sequence"] != current.sequence for item in queued):
        queued = [current.view(), *queued]
    for letter in queued:
        keep_letter(document, DeadLetter.of(letter))
    document["redrive"] = []


def push_document(kind: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """A new push subscription's delivery, as its entry keeps it."""
    return {
        "kind": kind,
        "stored": dict(stored),
        "status": ACTIVE,
        "delivered": 0,
        "retrying": 0,
        "dead_lettered": 0,
        "last_error": None,
    }


def push_counts(push: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: push[key] for key in ("status", "delivered", "retrying", "dead_lettered", "last_error")
    }


@dataclass(slots=True, eq=False)
class PushState:
    """A push subscription being delivered (its task runs): its kind, its filter, and what
    the loop holds between reads of the store."""

    kind: DeliveryKind
    entry: SubscriptionEntry
    stream_filter: StreamSelection | None = None
    """Set when its owner was last admitted."""
    admitted_at: float = 0.0
    admitted_caller: dict[str, Any] | None = None
    """The owner as last admitted: a request of theirs seen since is admitted again at once."""
    holding_ns: int | None = None
    """The storage time of the notification being delivered or waiting for a retry (the
    oldest this subscription has not delivered, a redriven dead letter aside): what the lag
    gauge reads at a scrape, with no read of the history."""

    @property
    def push(self) -> dict[str, Any]:
        push = self.entry.push
        assert push is not None
        return push

    @property
    def filter(self) -> StreamSelection:
        assert self.stream_filter is not None  # admitted before anything is read
        return self.stream_filter

    @property
    def active(self) -> bool:
        return self.entry.push is not None and self.entry.push["status"] == ACTIVE


Admit = Callable[[SubscriptionEntry], Awaitable[StreamSelection]]
"""The subscription's filter, its owner (as last seen) checked again against the stream's
roles and authorisers: raises ``AuthError`` (or ``ApiRefusal``) when refused."""


@dataclass(slots=True, eq=False)
class _Shard:
    """A shard of push subscriptions whose lease this process holds."""

    number: int
    patterns: dict[str, TopicPattern] = field(default_factory=dict)
    """The subject pattern of each push subscription of the shard this process delivers,
    idle or not, by key: the feed that wakes it."""
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """The subscriptions being delivered now, by key."""
    pushes: dict[str, PushState] = field(default_factory=dict)
    """Those of them whose entry was read."""
    woken: set[str] = field(default_factory=set)
    """Running subscriptions to read again before their task may end."""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    pending: set[str] = field(default_factory=set)
    """Subscriptions this process changed since they were last looked at."""
    ours: set[int] = field(default_factory=set)
    """Generations this process wrote that the holder has not seen yet."""


@dataclass(slots=True, eq=False)
class _Feed:
    """The live subscription to one subject pattern, shared by the push subscriptions of that
    pattern this process delivers: anything stored wakes each of them."""

    pattern: TopicPattern
    members: dict[str, _Shard] = field(default_factory=dict)
    live: asyncio.Event = field(default_factory=asyncio.Event)
    """Set while subscribed: a subscription reads history only after its feed is live."""
    task: asyncio.Task[None] | None = None


class Gone(Exception):
    """The subscription was deleted (by any process) or disabled: its delivery ends."""


class DeliveryRunner:
    """Constructs the delivery kinds, and delivers every active push subscription of the
    shards whose lease this process holds (one holder per shard across the deployment)."""

    def __init__(self, service: ServiceAccess) -> None:
        self._service = service
        self._backend = service.backend
        self.kinds: dict[str, DeliveryKind] = {
            kind: cls(dict(service.options("subscriptions", kind, cls.options_schema)))
            for kind, cls in sorted(service.delivery_kinds.items())
        }
        self._metrics = DeliveryMetrics(service.metrics_registry, self.kinds)
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_DELIVERIES)
        self._started: list[DeliveryKind] = []
        self._keepers: list[LeaseKeeper] = []
        self._shards: dict[int, _Shard] = {}
        self._feeds: dict[TopicPattern, _Feed] = {}
        self._store: SubscriptionStore | None = None
        self._admit: Admit | None = None

    async def start(self, store: SubscriptionStore, leases: SharedState, admit: Admit) -> None:
        try:
            for kind in self.kinds.values():
                await kind.start()
                self._started.append(kind)
        except BaseException:
            await self._close_kinds()
            raise
        self._store, self._admit = store, admit
        store.on_change = self._wake_shard
        holder = holder_id()
        self._keepers = [
            LeaseKeeper(
                Lease(leases, f"deliveries.{shard}", holder, DEFAULT_LEASE_SECONDS),
                partial(self._take, shard),
                partial(self._drop, shard),
            )
            for shard in range(SHARDS)
        ]
        for keeper in self._keepers:
            try:
                await keeper.try_take()
            except Exception as exc:  # the keeper tries again
                log_failure("delivery.lease_failed", "delivery shard not taken", exc)
            keeper.start()

    async def close(self) -> None:
        keepers, self._keepers = self._keepers, []
        for keeper in keepers:
            await keeper.stop()
        await self._close_kinds()

    async def _close_kinds(self) -> None:
        while self._started:
            kind = self._started.pop()
            try:
                await kind.close()
            except Exception as exc:
                log_failure("delivery.close_failed", "delivery kind close failed", exc)

    def census(self) -> Iterator[tuple[str, str, int | None]]:
        """Each subscription this process knows of: its delivery kind (``pull`` for a pulled
        one), its status and, for one it delivers, the storage time of the notification it
        holds undelivered."""
        if self._store is None:
            return
        census = self._store.census
        for _ in range(census.pulled):
            yield PULL, ACTIVE, None
        holding = {
            key: push.holding_ns
            for shard in self._shards.values()
            for key, push in shard.pushes.items()
        }
        for key, (kind, status) in tuple(census.push.items()):
            yield kind, status, holding.get(key)

    def _wake_shard(self, shard: int, key: str, generation: int) -> None:
        held = self._shards.get(shard)
        if held is not None:
            held.pending.add(key)
            held.ours.add(generation)
            held.wake.set()

    # -- shards -------------------------------------------------------------------------------

    async def _take(self, number: int) -> None:
        shard = self._shards[number] = _Shard(number)
        shard.task = asyncio.create_task(self._follow_shard(shard))

    async def _drop(self, number: int) -> None:
        shard = self._shards.pop(number, None)
        if shard is None:
            return
        tasks = [task for task in (shard.task, *shard.tasks.values()) if task]
        for key in [*shard.patterns]:
            tasks.extend(self._leave(shard, key))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow_shard(self, shard: _Shard) -> None:
        """Look at what changed in the shard: the subscriptions this process changed at once
        (one read each), and every one (a scan) when the generation moved by a change of
        another process's (checked every ``SCAN_SECONDS``)."""
        store = self._store
        assert store is not None
        seen = -1
        while True:
            shard.wake.clear()
            try:
                found = await store.state.get(generation_key(shard.number))
                generation = 0 if found is None else int(found.value)
                if generation != seen:
                    elsewhere = seen < 0 or any(
                        count not in shard.ours for count in range(seen + 1, generation + 1)
                    )
                    shard.ours = {count for count in shard.ours if count > generation}
                    if elsewhere:
                        shard.pending.clear()
                        await self._scan(shard)
                    seen = generation
                while shard.pending:
                    self._wake_one(shard, shard.pending.pop())
            except Exception as exc:
                log_failure("delivery.scan_failed", "subscriptions not scanned", exc)
            if not shard.pending:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
                # cancellation that arrives as the wake-up does, and the loop never ends.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SCAN_SECONDS):
                        await shard.wake.wait()

    async def _scan(self, shard: _Shard) -> None:
        store = self._store
        assert store is not None
        if shard.number == 0:
            await store.recount()  # one shard's holder refreshes the census's total
        keys = [
            indexed_entry_key(key)
            for key in await store.state.keys(push_index_prefix(shard.number))
        ]
        present = set(keys)
        for key in [key for key in {**shard.patterns, **shard.tasks} if key not in present]:
            self._end(shard, key)
        for key in keys:
            self._wake_one(shard, key)

    def _wake_one(self, shard: _Shard, key: str) -> None:
        """Have the subscription stored under ``key`` read its entry (delivering from its
        cursor, a redrive, its owner seen anew) or stop (deleted): start its task, or have
        the running one read again before it ends."""
        if key in shard.tasks:
            shard.woken.add(key)
        else:
            shard.tasks[key] = asyncio.create_task(self._deliver(shard, key))

    def _end(self, shard: _Shard, key: str) -> None:
        task = shard.tasks.pop(key, None)
        if task is not None:
            task.cancel()
        shard.pushes.pop(key, None)
        shard.woken.discard(key)
        for feed_task in self._leave(shard, key):
            feed_task.cancel()

    # -- live feeds -----------------------------------------------------------------------------

    def _join(self, shard: _Shard, key: str, pattern: TopicPattern) -> _Feed:
        feed = self._feeds.get(pattern)
        if feed is None:
            feed = self._feeds[pattern] = _Feed(pattern)
            feed.task = asyncio.create_task(self._follow_feed(feed))
        shard.patterns[key] = feed.pattern  # one object per pattern, however many subscribe
        feed.members[key] = shard
        return feed

    def _leave(self, shard: _Shard, key: str) -> list[asyncio.Task[None]]:
        """Forget the subscription's feed membership; the feed's task, to cancel, when it was
        the feed's last member."""
        pattern = shard.patterns.pop(key, None)
        feed = None if pattern is None else self._feeds.get(pattern)
        if feed is None or feed.members.get(key) is not shard:
            return []
        del feed.members[key]
        if feed.members:
            return []
        del self._feeds[feed.pattern]
        return [feed.task] if feed.task is not None else []

    async def _follow_feed(self, feed: _Feed) -> None:
        """Subscribe, then wake every member: at once (what was stored while the feed was
        down is read) and on each stored notification."""
        while True:
            wakeup = Wakeup()
            try:
                subscription = await self._backend.subscribe(feed.pattern, wakeup)
            except Exception as exc:
                log_failure("delivery.subscribe_failed", "live subscription failed", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            try:
                feed.live.set()
                while not wakeup.ended:
                    for key, shard in list(feed.members.items()):
                        self._wake_one(shard, key)
                    await wakeup.event.wait()
                    wakeup.event.clear()
            finally:
                feed.live.clear()
                await subscription.close()
            await asyncio.sleep(RETRY_SECONDS)  # the feed ended: the store may be down

    # -- one push subscription ------------------------------------------------------------------

    async def _deliver(self, shard: _Shard, key: str) -> None:
        """The task of the subscription stored under ``key``: until it has caught up, or is
        deleted or no longer active."""
        store = self._store
        assert store is not None
        try:
            while True:
                try:
                    found = await store.state.get(key)
                    break
                except Exception as exc:
                    log_failure("delivery.read_failed", "subscription not read", exc)
                    await asyncio.sleep(RETRY_SECONDS)
            if found is None:  # deleted, or its create not finished: the next look sees
                raise Gone
            entry = SubscriptionEntry.decode(found.value, found.revision)
            store.census.note(entry)
            push = entry.push
            if push is None or push["status"] != ACTIVE or push["kind"] not in self.kinds:
                raise Gone
            state = shard.pushes[key] = PushState(self.kinds[push["kind"]], entry)
            await self._run(shard, state)
        except Gone:
            for task in self._leave(shard, key):
                task.cancel()
        finally:
            # No await between the last look at ``woken`` and here: a notification stored
            # after it finds no task and starts one.
            if shard.tasks.get(key) is asyncio.current_task():
                del shard.tasks[key]
                shard.pushes.pop(key, None)
                shard.woken.discard(key)

    async def _run(self, shard: _Shard, push: PushState) -> None:
        """Admit, join the pattern's feed, wait for it to be live, then read: whatever is
        stored after a read found nothing has already woken the subscription. Raises
        ``Gone`` when it is deleted or disabled."""
        while not await self._admitted(push):
            await asyncio.sleep(RETRY_SECONDS)
        feed = self._join(shard, push.entry.key, push.filter.pattern)
        await feed.live.wait()
        await self._read(shard, push)

    async def _admitted(self, push: PushState) -> bool:
        """Check the owner again (roles and authorisers, as when the subscription was
        created); a refusal makes it ``forbidden``. ``False``: no verdict now."""
        assert self._admit is not None
        try:
            caller = push.entry.caller
            push.stream_filter = await self._admit(push.entry)
            push.admitted_at, push.admitted_caller = time.monotonic(), caller
            return True
        except (AuthError, ApiRefusal) as exc:
            if isinstance(exc, AuthError) and exc.status not in (401, 403):
                log_failure("delivery.admission_failed", "owner not checked", exc)
                return False
            error = {"error": "the owner may no longer read this stream", "at": now()}
            await self._save(push, None, partial(_forbid, error))
            log_event(
                "delivery.forbidden",
                "the owner may no longer read the subscription's stream: it stops",
                subscription=push.entry.name,
            )
            raise Gone from exc
        except Exception as exc:
            log_failure("delivery.admission_failed", "owner not checked", exc)
            return False

    async def _refresh(self, push: PushState) -> None:
        """Read the entry again (acknowledgements, a delete, a redrive from elsewhere)."""
        store = self._store
        assert store is not None
        entry = await store.get(push.entry.owner, push.entry.name)
        if entry is None or entry.uid != push.entry.uid or entry.push is None:
            raise Gone
        push.entry = entry
        if not push.active:
            raise Gone

    async def _read(self, shard: _Shard, push: PushState) -> None:
        """Until the subscription has caught up and nothing woke it since its last read."""
        store = self._store
        assert store is not None
        key = push.entry.key
        while True:
            shard.woken.discard(key)
            try:
                await self._refresh(push)
                stale = time.monotonic() - push.admitted_at > ADMISSION_SECONDS
                stale = stale or push.entry.caller != push.admitted_caller
                if stale and not await self._admitted(push):
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                letters, _ = await store.dead_letters(push.entry)
                if letters["redrive"]:
                    await self._redrive(push, DeadLetter.of(letters["redrive"][0]))
                    continue
                stream_filter = push.filter
                bound = await self._backend.history_bound(stream_filter.pattern)
                if push.entry.next_sequence > (bound or 0):
                    # Nothing stored after the cursor: no history read (on JetStream, no
                    # consumer) for a subscription that is idle.
                    if key not in shard.woken:
                        return
                    continue
                cursor = StartCursor(from_sequence=push.entry.next_sequence)
                batch = await self._backend.fetch_batch(stream_filter.pattern, cursor, BATCH_SIZE)
                selected = await stream_filter.select(batch.messages)
            except Gone:
                raise
            except Exception as exc:
                log_failure("delivery.read_failed", "history page failed", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            for record in selected:
                await self._push(push, record)
            if selected:
                continue  # read the entry again before the next page
            if batch.has_more and batch.next_sequence is not None:
                # Records examined without a match are passed over too.
                await self._save(push, batch.next_sequence - 1, _no_count)
            elif not batch.has_more and key not in shard.woken:
                return

    async def _redrive(self, push: PushState, letter: DeadLetter) -> None:
        record = await self._record(push, letter)
        if record is not None:
            await self._push(push, record, letter)
        store = self._store
        assert store is not None
        await store.change_dead_letters(push.entry, partial(_unqueue, letter.sequence))

    async def _record(self, push: PushState, letter: DeadLetter) -> StoredNotification | None:
        """The stored notification a dead letter names, if it is still retained."""
        sequence = letter.sequence
        batch = await self._backend.fetch_batch(
            push.filter.pattern, StartCursor(from_sequence=sequence), 1
        )
        if batch.messages and batch.messages[0].sequence == sequence:
            return batch.messages[0]
        log_event(
            "delivery.redrive_missing",
            "dead letter no longer stored: not redriven",
            logging.WARNING,
            sequence=sequence,
        )
        return None

    async def _save(
        self,
        push: PushState,
        sequence: int | None,
        count: Callable[[dict[str, Any]], None],
    ) -> None:
        """Apply ``count`` to the delivery's counts and move the cursor to ``sequence`` (when
        given), in one write; tried until written (a store that cannot be reached now must
        not lose a delivered notification's cursor move). Raises ``Gone`` when deleted."""
        store = self._store
        assert store is not None

        def mutate(entry: SubscriptionEntry) -> bool:
            if entry.push is None:
                return False
            count(entry.push)
            if sequence is not None:
                entry.delivered_through(sequence)
                entry.acknowledge(sequence)
            return True

        while True:
            try:
                written = await store.change(push.entry, mutate)
                break
            except Exception as exc:
                log_failure("delivery.save_failed", "delivery state not written", exc)
                await asyncio.sleep(RETRY_SECONDS)
        if written is None:
            raise Gone
        push.entry = written

    async def _push(
        self,
        push: PushState,
        record: StoredNotification,
        redriven: DeadLetter | None = None,
    ) -> None:
        """Deliver one notification (``redriven``: a dead letter's) with its retries; move
        the cursor past it unless the receiver is gone."""
        event_type = push.entry.definition["event_type"]
        try:
            notification = self._service.consumed_notification(event_type, record)
        except ValueError as exc:
            log_event(
                "delivery.unreadable",
                f"notification passed over: {exc}",
                logging.WARNING,
                event_type=event_type,
                sequence=record.sequence,
            )
            await self._save(push, None if redriven else record.sequence, _no_count)
            return
        push.holding_ns = record.time_ns
        try:
            await self._attempts(push, record, notification, redriven)
        finally:
            push.holding_ns = None

    async def _attempts(
        self,
        push: PushState,
        record: StoredNotification,
        notification: ConsumedNotification,
        redriven: DeadLetter | None,
    ) -> None:
        kind = push.kind
        entry = push.entry
        delays = tuple(kind.retry_delays)
        counter = self._metrics.attempts
        # A redriven dead letter is behind the cursor: it moves nothing.
        sequence = None if redriven else record.sequence
        attempt = 1
        while True:
            stored = push.push["stored"]
            result = await self._attempt(
                kind, DeliveryAttempt(entry.name, entry.owner, stored, notification, attempt)
            )
            counter.labels(kind.kind, result.outcome).inc()
            if result.outcome == "delivered":
                latency = max(0.0, time.time() - record.time_ns / 1e9)
                self._metrics.latency.labels(kind.kind).observe(latency)
                await self._save(push, sequence, _delivered)
                return
            error = None if result.error is None else result.error[:ERROR_CHARACTERS]
            last_error = {
                "sequence": record.sequence,
                "attempt": attempt,
                "error": error,
                "at": now(),
            }
            store = self._store
            assert store is not None
            if result.outcome == "gone":
                await store.change_dead_letters(entry, partial(disable_letters, current=redriven))
                await self._save(push, None, partial(_disabled, last_error))
                log_event(
                    "delivery.gone",
                    "the receiver asked for the subscription to stop: disabled",
                    subscription=entry.name,
                    sequence=record.sequence,
                )
                raise Gone
            if attempt > len(delays):
                letter = DeadLetter(record.sequence, attempt, error, now())
                await store.change_dead_letters(entry, partial(keep_letter, letter=letter))
                counter.labels(kind.kind, "dead_lettered").inc()
                await self._save(push, sequence, partial(_dead_lettered, last_error))
                return
            await self._save(push, None, partial(_retrying, last_error))
            await asyncio.sleep(delays[attempt - 1])
            await self._refresh(push)  # deleted or disabled meanwhile: stop retrying
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


# -- what each outcome does to a delivery's counts ----------------------------------------------


def _no_count(push: dict[str, Any]) -> None:
    pass


def _delivered(push: dict[str, Any]) -> None:
    push["delivered"] += 1
    push["retrying"] = 0


def _retrying(last_error: dict[str, Any], push: dict[str, Any]) -> None:
    push["retrying"] = 1
    push["last_error"] = last_error


def _dead_lettered(last_error: dict[str, Any], push: dict[str, Any]) -> None:
    push["retrying"] = 0
    push["dead_lettered"] += 1
    push["last_error"] = last_error


def _disabled(last_error: dict[str, Any], push: dict[str, Any]) -> None:
    push["status"] = DISABLED
    push["retrying"] = 0
    push["last_error"] = last_error


def _forbid(last_error: dict[str, Any], push: dict[str, Any]) -> None:
    push["status"] = FORBIDDEN
    push["retrying"] = 0
    push["last_error"] = last_error


def _unqueue(sequence: int, document: dict[str, Any]) -> None:
    document["redrive"] = [
        letter for letter in document["redrive"] if letter["sequence"] != sequence
    ]

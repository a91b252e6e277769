"""Counts the members of each group of a rule's source event type and publishes one
``complete`` notification when a group's members reach the expected set, one ``incomplete``
when its deadline passes first.

Everything is kept in the consumer's shared state, so any worker or instance that takes the
consumer over carries on where the last one stopped:

- ``g.<group>``: an open group (its rule's source event type, values, members, first and
  last notification, whether its incomplete event was published), as of the last
  checkpoint;
- ``c.<group>.<status>``: the claim of a group's event of one status, which exactly one
  writer can create; it holds the event as it is published and says whether it was
  (or was refused by the notify API: never retried);
- ``p.<group>.<status>``: an event on its way, written before its claim and removed once
  the claim's event is published. A process taking the consumer over finishes each one it
  finds: claims it if nobody did, and publishes an unpublished claim again with the same
  message id and body, which the backend recognises as the same notification. So an event
  is published once a claim exists, and a claim, once there, is never published twice.

A claim is kept (a few hundred bytes per group and status) while any notification its
group counted is retained: every ``CLAIMS_SWEEP_SECONDS`` the active process removes those
whose last counted notification is pruned from the source's history. Open groups are
bounded by each rule's ``max_open_groups``.

Open groups are counted in memory and written once per page of notifications (at the
host's checkpoint, before the consumer's position moves past the page): a process that
stops in between leaves the page to the next holder, which counts it again.

Members are compared as text; a member seen again (a re-published notification, or one
handed over again after a restart) counts once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import heapq
import json
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_builtins.completion.rule import STATUS_FIELD, CompletionRule, member_key, rules_of
from aviso_plugins.consumers import (
    ConsumedNotification,
    ConsumedPage,
    ConsumerContext,
    NotificationConsumer,
)
from aviso_plugins.sinks import SinkRejected
from aviso_plugins.state import SharedState, StateEntry
from aviso_plugins.storage import StoredNotification

__all__ = ["CompletionConsumer"]

logger = logging.getLogger("aviso.completion")

COMPLETE, INCOMPLETE = "complete", "incomplete"
COMPLETED_KEPT = 10_000
"""Closed groups remembered in memory; older ones are looked up in the shared state."""
CLAIMS_SWEEP_SECONDS = 600.0
"""How often the active process removes the claims of groups no longer retained."""
IDS_KEPT = 100_000
"""Group ids remembered by rule and values (computing one is a hash of its values)."""
PAGE_READS = 1_000
"""Open groups a process that is not the active one reads for the groups page."""
WRITE_TRIES = 5
"""Compare-and-set attempts before a group write gives up (another holder keeps writing)."""
READ_RETRY_SECONDS = 1.0
"""Wait before reading the shared state again when a read a member's counting needs failed."""
LOAD_CONCURRENCY = 64
"""Open groups read at once when a process becomes the active one (one at a time, 10,000
groups on JetStream took about 3 s of a lease that lives 6 s)."""
CLOSE_CONCURRENCY = 64
"""Groups whose deadlines passed closed at once (one at a time, thousands of them would
take a few round trips each, far past the second their events are due in)."""
SWEEP_YIELD_EVERY = 100
"""Claims the sweep examines between two turns it gives the event loop (a process-local
state answers without suspending, so a long list would otherwise hold the loop)."""


def group_id(source: str, values: Mapping[str, Any]) -> str:
    """A key segment naming one group of one rule."""
    text = json.dumps([source, values], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def dumps(value: Any) -> bytes:
    """``value`` as JSON: by orjson (a fifth of the standard encoder's cost: a group is
    written once per page it counted members in), or by the standard encoder where orjson
    refuses (integers beyond 64 bits, lone surrogates)."""
    # Imported here: discovering the plugins (``aviso-server --help``) loads no encoder.
    import orjson

    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value).encode()


def moment(record: StoredNotification) -> dict[str, Any]:
    seconds, nanoseconds = divmod(record.time_ns, 1_000_000_000)
    return {"sequence": record.sequence, "time": f"{_stamp(seconds)}.{nanoseconds // 1000:06d}Z"}


@functools.lru_cache(maxsize=16)
def _stamp(seconds: int) -> str:
    # Cached: the members a page counts were mostly stored within a second or two.
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


class Group:
    """One open group, as this process counts it (its members a set, its latest member's
    time formatted only when written or shown)."""

    __slots__ = (
        "_last",
        "_last_seen",
        "deadline",
        "first",
        "incomplete",
        "members",
        "revision",
        "source",
        "values",
    )

    def __init__(
        self,
        source: str,
        values: dict[str, Any],
        members: set[str],
        first: dict[str, Any],
        last: dict[str, Any],
        deadline: float,
        incomplete: bool = False,
        revision: int | None = None,
    ) -> None:
        self.source = source
        self.values = values
        self.members = members
        self.first = first
        self._last = last
        self._last_seen: StoredNotification | None = None
        self.deadline = deadline
        """Seconds since the epoch: the first member's storage time plus the rule's deadline."""
        self.incomplete = incomplete
        self.revision = revision
        """The revision of the group's entry this process last read or wrote (``None``:
        not written yet)."""

    @classmethod
    def started_by(
        cls, rule: CompletionRule, values: dict[str, Any], member: str, record: StoredNotification
    ) -> Group:
        first = moment(record)
        deadline = record.time_ns / 1e9 + rule.deadline_seconds
        return cls(rule.source, values, {member}, first, first, deadline)

    @property
    def last(self) -> dict[str, Any]:
        """The latest member counted: its ``sequence`` and ``time``."""
        if self._last_seen is not None:
            self._last = moment(self._last_seen)
            self._last_seen = None
        return self._last

    def count(self, member: str, record: StoredNotification) -> None:
        self.members.add(member)
        self._last_seen = record

    def merge(self, other: Group) -> None:
        """Take in what another holder wrote (``other``, read since): members seen by
        either count."""
        self.members |= other.members
        self.incomplete = self.incomplete or other.incomplete
        if other.first["sequence"] < self.first["sequence"]:
            self.first = other.first
        if other.last["sequence"] > self.last["sequence"]:
            self._last = other.last
        self.revision = other.revision

    def encode(self) -> bytes:
        # Members in no particular order: sorting them would double the cost of a write.
        return dumps(
            {
                "source": self.source,
                "values": self.values,
                "members": list(self.members),
                "first": self.first,
                "last": self.last,
                "deadline": self.deadline,
                "incomplete": self.incomplete,
            }
        )

    @classmethod
    def decode(cls, data: bytes, revision: int) -> Group:
        document = json.loads(data)
        return cls(
            document["source"],
            document["values"],
            set(document["members"]),
            document["first"],
            document["last"],
            document["deadline"],
            document["incomplete"],
            revision,
        )


class CompletionConsumer(NotificationConsumer):
    """Publishes the completion events of every ``completion`` rule."""

    name = "completion"
    start_at: ClassVar[str] = "end"
    _latest: ClassVar[weakref.ref[CompletionConsumer] | None] = None

    @classmethod
    def running(cls) -> CompletionConsumer | None:
        """The consumer this process constructed last (every worker constructs one, active
        or not), for the page that shows the open groups."""
        return cls._latest() if cls._latest is not None else None

    @classmethod
    def wanted_event_types(cls, schemas: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
        return frozenset(rules_of(schemas))

    def __init__(self, context: ConsumerContext) -> None:
        super().__init__(context)
        self.rules = rules_of(context.schemas)
        self._groups: dict[str, Group] = {}
        self._open: dict[str, int] = {}
        """Open groups held, per source event type."""
        self._ages: dict[str, list[tuple[int, str]]] = {}
        """Per source event type, a heap of its held groups by first sequence (with entries
        of groups since closed, passed over when popped): the oldest is found without
        looking at every open group."""
        self._unwritten: set[str] = set()
        """Held groups counted since their last write (written at the next checkpoint)."""
        self._late: dict[str, int] = {}
        """Closed groups whose members came again since the last checkpoint: the highest
        sequence of each (their claims are kept while it is retained)."""
        self._ids: dict[tuple[Any, ...], str] = {}
        """Group ids of groups lately seen, by their rule and values."""
        self._text_ids: dict[str, dict[tuple[Any, ...], str]] = {}
        """Per source event type, group ids of groups lately seen whose values are all
        text, by their values (what :meth:`consume_page` looks up first)."""
        self._completed: OrderedDict[str, None] = OrderedDict()
        """Groups this process closed lately (a late copy of a member needs no read)."""
        self._deadlines: list[tuple[float, str]] = []
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._helpers: list[asyncio.Task[None]] = []
        """The claims' sweeper, and what retries the events that failed again at start."""
        self._lock = asyncio.Lock()
        self.evicted = 0
        """Open groups closed because their rule's ``max_open_groups`` was reached."""
        CompletionConsumer._latest = weakref.ref(self)

    async def open_groups(self, limit: int, sources: set[str]) -> list[Group]:
        """At most ``limit`` open groups of ``sources``, the most recently started first:
        this process's own when it is the active one, else as the shared state holds them
        (at most ``PAGE_READS`` of them read)."""
        if self._timer is not None:
            found = list(self._groups.values())
        else:
            found = []
            for key in (await self._state.keys("g."))[:PAGE_READS]:
                entry = await self._state.get(key)
                if entry is not None:
                    found.append(Group.decode(entry.value, entry.revision))
        found = [group for group in found if group.source in sources]
        found.sort(key=lambda group: group.first["sequence"], reverse=True)
        return found[:limit]

    @property
    def _state(self) -> SharedState:
        state: SharedState = self.context.state
        return state

    async def start(self) -> None:
        """This process is the active one: load the open groups, publish what a previous
        holder claimed but did not publish, and start the deadline timer."""
        self._forget_held()
        unsettled = []
        for key in await self._state.keys("p."):
            try:
                await self._settle(key)
            except Exception:
                # Not a reason to refuse to start (the consumer starts with the server).
                logger.exception(
                    "completion event not published; tried again in a second",
                    extra={"event": "completion.publish_failed"},
                )
                unsettled.append(key)
        keys = await self._state.keys("g.")
        for index in range(0, len(keys), LOAD_CONCURRENCY):
            chunk = keys[index : index + LOAD_CONCURRENCY]
            entries = await asyncio.gather(*map(self._state.get, chunk))
            for key, entry in zip(chunk, entries, strict=True):
                if entry is not None:
                    self._take_over(key.removeprefix("g."), entry)
        self._timer = asyncio.create_task(self._run_deadlines())
        self._helpers = [asyncio.create_task(self._sweep_claims())]
        if unsettled:
            self._helpers.append(asyncio.create_task(self._settle_later(unsettled)))

    def _take_over(self, gid: str, entry: StateEntry) -> None:
        """Hold the open group ``entry`` as a previous holder wrote it."""
        group = Group.decode(entry.value, entry.revision)
        rule = self.rules.get(group.source)
        if rule is None:
            return
        self._hold(gid, group)
        if rule.complete(group.members):
            self._time(gid, 0.0)  # its complete event failed
        elif not group.incomplete:
            self._time(gid, group.deadline)

    def _time(self, gid: str, when: float) -> None:
        """Have the timer look at the group ``gid`` at ``when`` (seconds since the epoch)."""
        deadlines = self._deadlines
        heapq.heappush(deadlines, (when, gid))
        if len(deadlines) > 2 * len(self._groups) + 1024:
            # Mostly groups closed since (each stays filed until its deadline, an hour by
            # default): rebuilt from the held groups, so that it stays bounded by them.
            deadlines[:] = [
                (0.0 if self.rules[g.source].complete(g.members) else g.deadline, i)
                for i, g in self._groups.items()
                if not g.incomplete or self.rules[g.source].complete(g.members)
            ]
            heapq.heapify(deadlines)
        if deadlines and deadlines[0][1] == gid:
            self._wake.set()

    async def close(self) -> None:
        """Groups counted since the last checkpoint are not written: their notifications
        are handed over again to the next holder (the position did not move past them)."""
        tasks = [*self._helpers, *([self._timer] if self._timer is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._timer, self._helpers = None, []
        self._forget_held()

    def _forget_held(self) -> None:
        """What only the active process may trust: another may write in between."""
        self._groups.clear()
        self._open.clear()
        self._ages.clear()
        self._unwritten.clear()
        self._late.clear()
        self._completed.clear()
        self._deadlines.clear()

    def _drop(self, gid: str) -> None:
        group = self._groups.pop(gid, None)
        self._unwritten.discard(gid)
        if group is not None:
            self._open[group.source] -= 1

    def _hold(self, gid: str, group: Group) -> None:
        if gid not in self._groups:
            self._open[group.source] = self._open.get(group.source, 0) + 1
            ages = self._ages.setdefault(group.source, [])
            heapq.heappush(ages, (group.first["sequence"], gid))
            if len(ages) > 2 * self._open[group.source] + 1024:
                # Mostly groups closed since: rebuilt, so that the heap stays bounded.
                ages[:] = [
                    (g.first["sequence"], i)
                    for i, g in self._groups.items()
                    if g.source == group.source
                ]
                ages.append((group.first["sequence"], gid))
                heapq.heapify(ages)
        self._groups[gid] = group

    def _group_id(self, rule: CompletionRule, values: dict[str, Any]) -> str:
        # Keyed by each value's type too: 1, 1.0 and True are equal keys, not equal values.
        try:
            key = (rule.source, *values.values(), *map(type, values.values()))
            gid = self._ids.get(key)
        except TypeError:  # a value that cannot be a key (a list): hashed each time
            return group_id(rule.source, values)
        if gid is None:
            if len(self._ids) >= IDS_KEPT:
                self._ids.clear()
            gid = self._ids[key] = group_id(rule.source, values)
        return gid

    async def consume(self, notification: ConsumedNotification) -> None:
        rule = self.rules.get(notification.event_type)
        if rule is None:
            return
        identifier = notification.identifier
        try:
            member = member_key(identifier[rule.member])
            # No comprehension: this runs once per notification, and a comprehension is a
            # call of its own.
            values = dict(
                zip(rule.group_by, map(identifier.__getitem__, rule.group_by), strict=True)
            )
        except KeyError:
            return  # a field it does not name: no member of any group
        if not rule.counts(member):
            return
        gid = self._group_id(rule, values)
        group = self._groups.get(gid)
        if group is not None and not self._lock.locked():
            # The common case, answered without a suspension point (so nothing runs in
            # between, as under the lock): a member of a held group that cannot complete it.
            if member in group.members:
                return
            if len(group.members) + 1 < rule.expected_count:
                group.count(member, notification.record)
                self._unwritten.add(gid)
                return
        async with self._lock:
            await self._count(rule, gid, values, member, notification.record)

    async def consume_page(self, page: ConsumedPage) -> None:
        """:meth:`consume` for each notification of ``page``, reading only the rule's
        fields; a member whose counting fails is reported and passed over, the page goes
        on."""
        rule = self.rules.get(page.event_type)
        if rule is None:
            return
        # Ids of groups named by text values (what stored identifiers hold): a tuple of
        # other values is never equal to one of texts, so it is looked up safely here too.
        ids = self._text_ids.setdefault(rule.source, {})
        groups, unwritten, lock = self._groups, self._unwritten, self._lock
        expected, expected_keys = rule.expected_count, rule.expected_keys
        for record, found in page.fields(rule.fields):
            member = found[0]
            if type(member) is not str:
                member = member_key(member)
            if expected_keys is not None and member not in expected_keys:
                continue
            values = found[1:]
            gid = ids.get(values)
            if gid is None:
                gid = self._page_group_id(rule, values, ids)
            group = groups.get(gid)
            if group is not None and not lock.locked():
                # As in consume: a member of a held group that cannot complete it.
                if member in group.members:
                    continue
                if len(group.members) + 1 < expected:
                    group.count(member, record)
                    unwritten.add(gid)
                    continue
            try:
                async with lock:
                    await self._count(
                        rule, gid, dict(zip(rule.group_by, values, strict=True)), member, record
                    )
            except Exception as exc:
                page.failed(record, exc)

    def _page_group_id(
        self, rule: CompletionRule, values: tuple[Any, ...], ids: dict[tuple[Any, ...], str]
    ) -> str:
        gid = self._group_id(rule, dict(zip(rule.group_by, values, strict=True)))
        if all(type(value) is str for value in values):
            if len(ids) >= IDS_KEPT:
                ids.clear()
            ids[values] = gid
        return gid

    async def checkpoint(self) -> None:
        """Write every group counted since the last checkpoint (once per page and group),
        and keep the claims of closed groups whose members came again as long as those
        copies are retained."""
        async with self._lock:
            for gid, sequence in sorted(self._late.items()):
                for status in (COMPLETE, INCOMPLETE):
                    await self._retain_claim(f"c.{gid}.{status}", sequence)
                del self._late[gid]
            for gid in sorted(self._unwritten):
                group = self._groups.get(gid)
                self._unwritten.discard(gid)
                if group is not None:
                    try:
                        await self._write(gid, group)
                    except BaseException:
                        self._unwritten.add(gid)
                        raise

    async def _count(
        self,
        rule: CompletionRule,
        gid: str,
        values: dict[str, Any],
        member: str,
        record: StoredNotification,
    ) -> None:
        group = self._groups.get(gid)
        if group is None:
            # While active this process holds every open group (loaded at start, created
            # since), so only a group it does not hold can be complete already.
            if gid in self._completed or await self._read(f"c.{gid}.{COMPLETE}") is not None:
                # Closed already: a late copy changes nothing, but it is a notification of
                # the group, so the group's claims stay while it is retained.
                if record.sequence > self._late.get(gid, 0):
                    self._late[gid] = record.sequence
                return
            group = await self._load(gid)
            if group is None:
                group = Group.started_by(rule, values, member, record)
                self._hold(gid, group)
                self._unwritten.add(gid)
                self._time(gid, group.deadline)
                if self._open[rule.source] > rule.max_open_groups:
                    await self._keep_open_groups_bounded(rule)
                await self._complete_if_due(rule, gid, group)
                return
        if member in group.members:
            return
        group.count(member, record)
        self._unwritten.add(gid)
        await self._complete_if_due(rule, gid, group)

    async def _complete_if_due(self, rule: CompletionRule, gid: str, group: Group) -> None:
        if gid in self._groups and rule.complete(group.members):
            try:
                await self._finish(rule, gid, group, COMPLETE)
            except Exception:
                # This notification is not handed over again, and its group's later
                # copies change nothing: the timer tries again, else the event is lost.
                self._retry_soon(gid, group)
                raise

    async def _write(self, gid: str, group: Group) -> None:
        """Write ``group`` over the revision this process last read or wrote; when another
        holder wrote it since, keep the members either counted."""
        key = f"g.{gid}"
        for _ in range(WRITE_TRIES):
            if group.revision is None:
                revision = await self._state.create(key, group.encode())
            else:
                revision = await self._state.update(key, group.encode(), group.revision)
            if revision is not None:
                group.revision = revision
                return
            entry = await self._state.get(key)
            if entry is None:
                group.revision = None
                if await self._state.get(f"c.{gid}.{COMPLETE}") is not None:
                    self._drop(gid)  # another holder completed it
                    return
            else:
                group.merge(Group.decode(entry.value, entry.revision))
        raise RuntimeError(f"group {gid} of {group.source} kept changing under this consumer")

    async def _read(self, key: str) -> StateEntry | None:
        """``key``'s entry, read again until the shared state answers: a member whose
        counting failed would be passed over, and its group could never complete."""
        while True:
            try:
                return await self._state.get(key)
            except Exception:
                logger.exception(
                    "shared state not read; tried again in a second",
                    extra={"event": "completion.read_failed"},
                )
                await asyncio.sleep(READ_RETRY_SECONDS)

    async def _load(self, gid: str) -> Group | None:
        entry = await self._read(f"g.{gid}")
        if entry is None:
            return None
        group = Group.decode(entry.value, entry.revision)
        self._hold(gid, group)
        if not group.incomplete:
            # Written by another holder since this one started: its deadline is timed here too.
            self._time(gid, group.deadline)
        return group

    async def _keep_open_groups_bounded(self, rule: CompletionRule) -> None:
        ages = self._ages.get(rule.source, [])
        while self._open.get(rule.source, 0) > rule.max_open_groups and ages:
            sequence, gid = heapq.heappop(ages)
            group = self._groups.get(gid)
            if group is None:
                continue  # closed since
            if group.first["sequence"] != sequence:
                # Its first member changed (another holder's, merged), or it was closed and
                # opened again: filed again by its first member now.
                heapq.heappush(ages, (group.first["sequence"], gid))
                continue
            try:
                await self._evict(rule, gid, group)
            except BaseException:
                heapq.heappush(ages, (sequence, gid))  # still held: tried again later
                raise

    async def _evict(self, rule: CompletionRule, gid: str, group: Group) -> None:
        if not group.incomplete:
            await self._claim(rule, gid, group, INCOMPLETE)
        else:
            # Members counted since its incomplete event: its claim must stay as long.
            await self._retain_claim(f"c.{gid}.{INCOMPLETE}", group.last["sequence"])
        await self._forget(rule, gid, group)
        self.evicted += 1
        self.context.metrics.count("group_evicted")
        logger.warning(
            "open group closed: max_open_groups reached",
            extra={"event": "completion.group_evicted", "event_type": rule.source},
        )

    async def _retain_claim(self, key: str, sequence: int) -> None:
        """Keep the claim ``key`` at least until ``sequence`` is pruned."""
        for _ in range(WRITE_TRIES):
            entry = await self._state.get(key)
            if entry is None:
                return
            event = json.loads(entry.value)
            if event.get("retained_through", 0) >= sequence:
                return
            event["retained_through"] = sequence
            if await self._state.update(key, dumps(event), entry.revision):
                return
        raise RuntimeError(f"claim {key} kept changing under this consumer")

    async def _finish(self, rule: CompletionRule, gid: str, group: Group, status: str) -> None:
        await self._claim(rule, gid, group, status)
        if status == COMPLETE:
            await self._forget(rule, gid, group)
            return
        group.incomplete = True
        await self._write(gid, group)
        self._unwritten.discard(gid)

    async def _forget(self, rule: CompletionRule, gid: str, group: Group) -> None:
        if group.revision is not None:  # else never written
            await self._state.delete(f"g.{gid}")
        self._drop(gid)
        self._completed[gid] = None
        if len(self._completed) > COMPLETED_KEPT:
            self._completed.popitem(last=False)

    async def _claim(self, rule: CompletionRule, gid: str, group: Group, status: str) -> None:
        """Create the claim of this group's ``status`` event (unless one exists), then
        publish what the claim holds."""
        event = {
            "event_type": rule.event_type,
            "identifier": {**group.values, STATUS_FIELD: status},
            "payload": {
                "count": len(group.members),
                "expected": rule.expected_count,
                "missing": rule.missing(group.members),
                "first": group.first,
                "last": group.last,
            },
            "message_id": f"completion.{gid}.{status}",
            "published": False,
        }
        pending = f"p.{gid}.{status}"
        value = dumps(event)
        await self._state.put(pending, value)
        await self._settle(pending, value, event)

    async def _settle(
        self, pending: str, value: bytes | None = None, event: dict[str, Any] | None = None
    ) -> None:
        """Claim the event ``pending`` holds (``value``, parsed as ``event``, else read)
        unless it is claimed, publish the claim's event unless it was, and remove
        ``pending``."""
        if value is None:
            entry = await self._state.get(pending)
            if entry is None:
                return
            value = entry.value
        claim = "c." + pending.removeprefix("p.")
        revision = await self._state.create(claim, value)
        if revision is None:
            await self._publish_claim(claim)  # claimed before: as it holds
        else:
            await self._publish(claim, json.loads(value) if event is None else event, revision)
        await self._state.delete(pending)

    async def _publish_claim(self, key: str) -> None:
        entry = await self._state.get(key)
        if entry is not None:
            await self._publish(key, json.loads(entry.value), entry.revision)

    async def _publish(self, key: str, event: dict[str, Any], revision: int) -> None:
        """Publish the event of the claim ``key`` (at ``revision``) unless it was."""
        if event["published"]:
            return
        try:
            await self.context.publisher.publish(
                event["event_type"], event["identifier"], event["payload"], event["message_id"]
            )
        except SinkRejected as exc:
            # No retry can publish it (a topic or payload over the API's limits), and one
            # tried every second would keep its group open, and the oldest open group
            # blocks the closing of every other: settled as refused.
            logger.error(
                "completion event refused by the notify API: %s",
                exc.code,
                extra={"event": "completion.event_refused", "event_type": event["event_type"]},
            )
            self.context.metrics.count("event_refused")
            event["refused"] = exc.code
        event["published"] = True
        await self._state.update(key, dumps(event), revision)

    async def _settle_later(self, unsettled: list[str]) -> None:
        """Events a previous holder claimed, whose publish failed again at start: tried
        every second until published."""
        while unsettled:
            await asyncio.sleep(1.0)
            async with self._lock:
                try:
                    await self._settle(unsettled[0])
                    unsettled.pop(0)
                except Exception:
                    logger.exception(
                        "completion event not published; tried again in a second",
                        extra={"event": "completion.publish_failed"},
                    )

    async def _run_deadlines(self) -> None:
        while True:
            self._wake.clear()
            if not self._deadlines:
                await self._wake.wait()
                continue
            wait = self._deadlines[0][0] - time.time()
            if wait > 0:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
                # cancellation that arrives as the wake-up does, and the loop never ends.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                continue
            now, due = time.time(), dict[str, None]()
            while self._deadlines and self._deadlines[0][0] <= now and len(due) < CLOSE_CONCURRENCY:
                due[heapq.heappop(self._deadlines)[1]] = None
            async with self._lock:
                # Together: groups whose deadlines pass at once (a run's steps started
                # together) are each a few round trips to the shared state.
                await asyncio.gather(*map(self._close_due, due))

    async def _close_due(self, gid: str) -> None:
        group = self._groups.get(gid)
        if group is None:
            return
        rule = self.rules[group.source]
        # A complete group still here is one whose complete event failed.
        status = COMPLETE if rule.complete(group.members) else INCOMPLETE
        if status == INCOMPLETE and group.incomplete:
            return
        try:
            await self._finish(rule, gid, group, status)
        except Exception:
            self._retry_soon(gid, group)

    async def _sweep_claims(self) -> None:
        while True:
            await asyncio.sleep(CLAIMS_SWEEP_SECONDS)
            try:
                await self.remove_pruned_claims()
            except Exception:
                logger.exception(
                    "claims not swept; tried again later",
                    extra={"event": "completion.sweep_failed"},
                )

    async def remove_pruned_claims(self) -> int:
        """Remove the published claims whose group's counted notifications are all gone
        from the source's history (the claim's ``last`` sequence is pruned); how many. While
        one of them is retained its claim stays, so its group's event cannot be published
        again; once none is, a member published anew starts a new group. The claims of a
        group still open stay (it may count members after them)."""
        pruned = {
            source: await self.context.history.pruned_through(source) for source in self.rules
        }
        if not any(pruned.values()):
            return 0  # nothing pruned (or a backend that cannot tell): nothing to list
        sources = {rule.event_type: source for source, rule in self.rules.items()}
        removed = 0
        for examined, key in enumerate(await self._state.keys("c.")):
            if examined % SWEEP_YIELD_EVERY == SWEEP_YIELD_EVERY - 1:
                await asyncio.sleep(0)
            gid = key.split(".")[1]
            if gid in self._groups or gid in self._late:
                continue  # open, or a copy of a member came since the last checkpoint
            entry = await self._state.get(key)
            if entry is None:
                continue
            event = json.loads(entry.value)
            source = sources.get(event["event_type"])
            if source is None or not event["published"]:
                continue
            last = max(event["payload"]["last"]["sequence"], event.get("retained_through", 0))
            if last <= pruned[source]:
                removed += await self._state.delete(key, entry.revision)
        if removed:
            self.context.metrics.count("claim_removed", removed)
        return removed

    def _retry_soon(self, gid: str, group: Group) -> None:
        logger.exception(
            "completion event not published; tried again in a second",
            extra={"event": "completion.publish_failed", "event_type": group.source},
        )
        self._time(gid, time.time() + 1.0)

"""Named subscriptions whose cursor the server keeps: definitions, owners and cursors, in the
backend's shared state.

A subscription is keyed by its owner (the creating user's name; ``None`` with auth off, one
shared namespace) and its name, and kept as one JSON entry of the ``subscriptions`` bucket
(``s.<owner>.<name>``); a push subscription's dead letters are a second entry
(``d.<owner>.<name>``). Every change is a compare-and-set over the entry's revision, so
acknowledgements, deletes and deliveries from any worker or instance never undo each other.
On ``in_memory`` the bucket is process-local (as the notifications are); on ``jetstream``
it is a JetStream key-value bucket every worker and instance shares.

What only one process has (its open event streams) is kept beside, by key. The store checks
no input: the routes validate a definition as a watch before it gets here.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aviso_plugins.service import StreamControl
from aviso_plugins.state import SharedState, key_segment
from aviso_plugins.types import Caller

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def dumps(value: Any) -> str:
    """Compact JSON with sorted keys: what is stored, compared and measured."""
    return _ENCODER.encode(value)


def loads(data: bytes | str) -> Any:
    return json.loads(data)


def now() -> str:
    """The current time, to the second, as the API writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


NAME_RULE = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""Letters, digits, ``-``, ``_`` and ``.``, at most 64 characters (``.`` and ``..`` excepted:
clients and proxies resolve them as path segments)."""

MAX_OWNER_SEGMENT = 120
"""The longest owner segment written as the name itself: with the longest name and the
push index prefix, a key stays within ``MAX_KEY_LENGTH``."""
BUCKET = "subscriptions"
ACTIVE = "active"
"""A subscription that delivers (a pulled one always is; a push one until disabled)."""
DISABLED = "disabled"
"""A push subscription whose receiver said it is gone: it delivers nothing more."""
FORBIDDEN = "forbidden"
"""A push subscription whose owner may no longer read its stream: it delivers nothing more."""
PULL = "pull"
"""The delivery kind label of a subscription pulled over Server-Sent Events."""
TOTAL_KEY = "c.total"
"""How many subscriptions the server holds (``c.<owner>``: how many an owner holds)."""
RECOUNT_SECONDS = 60.0
SHARDS = 16
"""Push subscriptions are delivered by shard: the holder of a shard's lease delivers every
push subscription in it (a lease per subscription would cost a write per subscription and
renewal period, idle or not)."""


def _slot_count(value: bytes) -> tuple[int, float]:
    """A count and when it was written (``"<count> <unix time>"``)."""
    count, written_at = value.split()
    return int(count), float(written_at)


def valid_name(name: str) -> bool:
    return NAME_RULE.fullmatch(name) is not None and name not in (".", "..")


def _owner_segment(owner: str | None) -> str:
    if owner is None:
        return "anon"
    segment = key_segment(owner)
    if len(segment) <= MAX_OWNER_SEGMENT:
        return "u" + segment
    # A longer name would take the longest key (a push index key) past what every store
    # accepts; its digest, under a prefix of its own, names the owner as distinctly.
    digest = hashlib.sha256(owner.encode()).digest()
    return "h" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def entry_key(owner: str | None, name: str) -> str:
    return f"s.{_owner_segment(owner)}.{key_segment(name)}"


def _index_key(entry: SubscriptionEntry) -> str:
    return push_index_prefix(shard_of(entry.key)) + entry.key.removeprefix("s.")


def dead_key(owner: str | None, name: str) -> str:
    return f"d.{_owner_segment(owner)}.{key_segment(name)}"


def shard_of(key: str) -> int:
    """The shard of the subscription stored under ``key``."""
    digest = hashlib.blake2b(key.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % SHARDS


def push_index_prefix(shard: int) -> str:
    """Under it, one key per push subscription of the shard (what its holder lists)."""
    return f"p.{shard}."


def indexed_entry_key(index_key: str) -> str:
    """The entry a push index key names (``p.<shard>.<owner>.<name>``)."""
    return "s." + index_key.split(".", 2)[2]


def generation_key(shard: int) -> str:
    """A count moved by one whenever a push subscription of the shard is created, deleted or
    redriven."""
    return f"g.{shard}"


def caller_document(caller: Caller) -> dict[str, Any]:
    """What a subscription keeps of its owner, to check the stream's roles and authorisers
    again when it delivers (its credential's expiry aside: a push subscription outlives the
    request that created it)."""
    return {
        "username": caller.username,
        "realm": caller.realm,
        "roles": sorted(caller.roles),
        "attributes": dict(caller.attributes),
    }


def caller_from(document: Mapping[str, Any]) -> Caller:
    return Caller(
        username=document["username"],
        realm=document.get("realm"),
        roles=frozenset(document.get("roles", ())),
        attributes=dict(document.get("attributes", {})),
    )


@dataclass(slots=True, eq=False)
class SubscriptionEntry:
    """One subscription and its cursor, as read at ``revision``."""

    owner: str | None
    name: str
    definition: Mapping[str, Any]
    """What the client put, as it will be compared and shown: ``event_type``, ``identifier``,
    when given ``from_id`` / ``from_date``, and ``delivery`` as put."""
    created_at: str
    start_sequence: int
    """The first sequence it delivers: ``from_id``, the first stored at or after
    ``from_date``, or the first stored after its creation."""
    acknowledged: int | None = None
    """The highest sequence acknowledged; ``None`` before the first acknowledgement."""
    delivered: int = 0
    """The highest sequence written to one of its streams (what may be acknowledged)."""
    push: dict[str, Any] | None = None
    """A push subscription's delivery: ``kind``, ``stored`` (what the kind's ``prepare``
    kept, secrets included), ``status`` and the delivery counts; ``None`` for a pulled one."""
    caller: dict[str, Any] | None = None
    """The owner as of their last authenticated request (:func:`caller_document`)."""
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Tells this subscription from one deleted and created again under its name."""
    revision: int = 0

    @property
    def key(self) -> str:
        return entry_key(self.owner, self.name)

    @property
    def next_sequence(self) -> int:
        """Where its next stream starts: after the cursor, never before its start."""
        if self.acknowledged is None:
            return self.start_sequence
        return max(self.start_sequence, self.acknowledged + 1)

    def delivered_through(self, sequence: int) -> None:
        self.delivered = max(self.delivered, sequence)

    def acknowledge(self, sequence: int) -> None:
        """Move the cursor to ``sequence``; never backwards. The caller checked that it was
        delivered."""
        if self.acknowledged is None or sequence > self.acknowledged:
            self.acknowledged = sequence

    def encode(self) -> bytes:
        return dumps(
            {
                "owner": self.owner,
                "name": self.name,
                "definition": self.definition,
                "created_at": self.created_at,
                "start_sequence": self.start_sequence,
                "acknowledged": self.acknowledged,
                "delivered": self.delivered,
                "push": self.push,
                "caller": self.caller,
                "uid": self.uid,
            }
        ).encode()

    @classmethod
    def decode(cls, value: bytes, revision: int) -> SubscriptionEntry:
        document = loads(value)
        return cls(
            owner=document["owner"],
            name=document["name"],
            definition=document["definition"],
            created_at=document["created_at"],
            start_sequence=document["start_sequence"],
            acknowledged=document["acknowledged"],
            delivered=document["delivered"],
            push=document["push"],
            caller=document.get("caller"),
            uid=document["uid"],
            revision=revision,
        )


@dataclass(slots=True)
class Census:
    """What this process last saw, for the metrics (read at a scrape, which cannot wait for
    the store): each push subscription's kind and status, and how many subscriptions the
    deployment holds (pulled ones are that less the push ones: kept as a count, so that an
    idle pulled subscription costs this process nothing)."""

    push: dict[str, tuple[str, str]] = field(default_factory=dict)
    total: int = 0

    def note(self, entry: SubscriptionEntry) -> None:
        push = entry.push
        if push is not None:
            self.push[entry.key] = (push["kind"], push["status"])

    def forget(self, key: str) -> None:
        self.push.pop(key, None)

    @property
    def pulled(self) -> int:
        return max(0, self.total - len(self.push))


class SubscriptionStore:
    """Every subscription, by owner then name, in one shared-state bucket."""

    def __init__(self, state: SharedState) -> None:
        self.state = state
        self.census = Census()
        self._streams: dict[str, set[StreamControl]] = {}
        self.on_change: Callable[[int, str, int], None] | None = None
        """Called with the shard, key and new generation of a push subscription created,
        deleted or redriven here (the delivery runner tells the shard's holder when it is
        this process)."""

    async def get(self, owner: str | None, name: str) -> SubscriptionEntry | None:
        found = await self.state.get(entry_key(owner, name))
        if found is None:
            self.census.forget(entry_key(owner, name))
            return None
        entry = SubscriptionEntry.decode(found.value, found.revision)
        self.census.note(entry)
        return entry

    async def owned(self, owner: str | None) -> list[SubscriptionEntry]:
        """The owner's subscriptions, by name."""
        entries = []
        for key in await self.state.keys(f"s.{_owner_segment(owner)}."):
            found = await self.state.get(key)
            if found is not None:
                entries.append(SubscriptionEntry.decode(found.value, found.revision))
        for entry in entries:
            self.census.note(entry)
        return sorted(entries, key=lambda entry: entry.name)

    async def add(self, entry: SubscriptionEntry, per_user: int, total: int) -> str | None:
        """Store a new subscription if its owner holds fewer than ``per_user`` and the server
        fewer than ``total``: ``"created"``, ``"exists"`` (its name is taken, by any
        process), or which cap is full (``"per_user"``, ``"total"``)."""
        owner = _owner_segment(entry.owner)
        if not await self._take_slot(f"c.{owner}", f"s.{owner}.", per_user):
            return "per_user"
        if not await self._take_slot(TOTAL_KEY, "s.", total):
            await self._give_slot(f"c.{owner}")
            return "total"
        revision = await self.state.create(entry.key, entry.encode())
        if revision is None:
            await self._give_slot(f"c.{owner}")
            await self._give_slot(TOTAL_KEY)
            return "exists"
        entry.revision = revision
        self.census.note(entry)
        if entry.push is not None:
            await self.state.put(_index_key(entry), b"")
        await self._changed(entry)
        return "created"

    async def remove(self, entry: SubscriptionEntry) -> None:
        """Delete it (whatever its revision now), its dead letters and its open streams
        here (those of other processes end at their next check)."""
        if await self.state.delete(entry.key):
            await self._give_slot(f"c.{_owner_segment(entry.owner)}")
            await self._give_slot(TOTAL_KEY)
        await self.state.delete(dead_key(entry.owner, entry.name))
        if entry.push is not None:
            await self.state.delete(_index_key(entry))
        self.census.forget(entry.key)
        for control in tuple(self._streams.get(entry.key, ())):
            control.stop("end_of_stream")
        await self._changed(entry)

    async def _take_slot(self, key: str, prefix: str, cap: int) -> bool:
        """Count one more subscription under ``key`` if fewer than ``cap`` are counted (a
        compare-and-set: concurrent takers on any worker never pass the cap together).

        A process killed between counting and storing (or deleting and uncounting) leaves
        the count one too high: a full count not written for ``RECOUNT_SECONDS`` (longer
        than any create in progress takes) is recounted from the subscriptions stored."""
        while True:
            found = await self.state.get(key)
            count, written_at = (0, 0.0) if found is None else _slot_count(found.value)
            if count >= cap:
                if time.time() - written_at < RECOUNT_SECONDS:
                    return False
                count = len(await self.state.keys(prefix))
                if count >= cap:
                    return False
            value = f"{count + 1} {time.time()}".encode()
            if found is None:
                revision = await self.state.create(key, value)
            else:
                revision = await self.state.update(key, value, found.revision)
            if revision is not None:
                if key == TOTAL_KEY:
                    self.census.total = count + 1
                return True

    async def _give_slot(self, key: str) -> None:
        while True:
            found = await self.state.get(key)
            if found is None:
                return
            count = max(0, _slot_count(found.value)[0] - 1)
            value = f"{count} {time.time()}".encode()
            if await self.state.update(key, value, found.revision) is not None:
                if key == TOTAL_KEY:
                    self.census.total = count
                return

    async def recount(self) -> None:
        """Read how many subscriptions the deployment holds (for the census)."""
        found = await self.state.get(TOTAL_KEY)
        self.census.total = 0 if found is None else _slot_count(found.value)[0]

    async def change(
        self, entry: SubscriptionEntry, mutate: Callable[[SubscriptionEntry], bool | None]
    ) -> SubscriptionEntry | None:
        """Apply ``mutate`` to the entry as stored now and write it over that revision,
        again until no other writer came in between; the entry written (``entry`` itself,
        updated), or ``None`` when the subscription is gone. ``mutate`` returning ``False``
        writes nothing."""
        current: SubscriptionEntry | None = entry
        while current is not None:
            if mutate(current) is False:
                break
            revision = await self.state.update(current.key, current.encode(), current.revision)
            if revision is not None:
                current.revision = revision
                break
            current = await self.get(entry.owner, entry.name)
            if current is not None and current.uid != entry.uid:
                current = None  # deleted and created again meanwhile: another subscription
        if current is None:
            self.census.forget(entry.key)
            return None
        self.census.note(current)
        return current

    async def dead_letters(self, entry: SubscriptionEntry) -> tuple[dict[str, Any], int]:
        """The dead-letter document (``letters``, ``redrive``, ``dropped``) and its revision
        (0: none yet). A document another subscription of the same name left (deleted while
        it delivered) reads as empty, at its revision, so the next write replaces it."""
        found = await self.state.get(dead_key(entry.owner, entry.name))
        if found is None:
            return {"letters": [], "redrive": [], "dropped": 0}, 0
        document: dict[str, Any] = loads(found.value)
        if document.get("uid", entry.uid) != entry.uid:
            return {"letters": [], "redrive": [], "dropped": 0}, found.revision
        return document, found.revision

    async def change_dead_letters(
        self, entry: SubscriptionEntry, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        """Compare-and-set the dead-letter document, as :meth:`change` does an entry; nothing
        is written for a subscription deleted meanwhile (its letters must not reach another
        subscription created under its name)."""
        key = dead_key(entry.owner, entry.name)
        while True:
            document, revision = await self.dead_letters(entry)
            current = await self.get(entry.owner, entry.name)
            if current is None or current.uid != entry.uid:
                return document
            mutate(document)
            document["uid"] = entry.uid
            value = dumps(document).encode()
            if revision == 0:
                written = await self.state.create(key, value)
            else:
                written = await self.state.update(key, value, revision)
            if written is not None:
                return document

    async def redriven(self, entry: SubscriptionEntry) -> None:
        """Its dead letters were queued, or its owner seen anew: its holder reads it again."""
        await self._changed(entry)

    async def _changed(self, entry: SubscriptionEntry) -> None:
        """A push subscription was created, deleted or redriven: its shard's generation (a
        count every change moves by one, polled by the shard's holder in any process) moves,
        and a holder here is told which subscription and which count were its own."""
        if entry.push is None:
            return
        shard = shard_of(entry.key)
        key = generation_key(shard)
        while True:
            found = await self.state.get(key)
            count = 0 if found is None else int(found.value)
            value = str(count + 1).encode()
            if found is None:
                revision = await self.state.create(key, value)
            else:
                revision = await self.state.update(key, value, found.revision)
            if revision is not None:
                break
        if self.on_change is not None:
            self.on_change(shard, entry.key, count + 1)

    # -- this process's open event streams --------------------------------------------------

    def track(self, entry: SubscriptionEntry, control: StreamControl) -> None:
        self._streams.setdefault(entry.key, set()).add(control)

    def untrack(self, entry: SubscriptionEntry, control: StreamControl) -> None:
        controls = self._streams.get(entry.key)
        if controls is not None:
            controls.discard(control)
            if not controls:
                del self._streams[entry.key]


async def still_there(store: SubscriptionStore, entry: SubscriptionEntry) -> bool:
    """Whether ``entry`` is still stored (not deleted, nor deleted and created again)."""
    current = await store.get(entry.owner, entry.name)
    return current is not None and current.uid == entry.uid


WATCH_SECONDS = 5.0
"""How often an open events stream checks that its subscription was not deleted elsewhere."""


async def end_when_deleted(
    store: SubscriptionStore, entry: SubscriptionEntry, control: StreamControl
) -> None:
    """Stop ``control`` once ``entry`` is deleted by any process (checked every
    ``WATCH_SECONDS``); a store that cannot be reached ends nothing."""
    while control.stop_reason is None:
        await asyncio.sleep(WATCH_SECONDS)
        try:
            there = await still_there(store, entry)
        except Exception:  # checked again at the next round
            continue
        if not there:
            control.stop("end_of_stream")

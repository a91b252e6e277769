"""Named subscriptions whose cursor the server keeps: definitions, owners and cursors.

Process-local (the in-memory backend's lifetime): one :class:`SubscriptionStore` per service.
A subscription is keyed by its owner (the creating user's name; ``None`` with auth off, one
shared namespace) and its name. The store checks no input: the routes validate a definition
as a watch before it gets here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aviso_host.streaming.control import StreamControl

if TYPE_CHECKING:
    from aviso_host.deliveries import PushState

NAME_RULE = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""Letters, digits, ``-``, ``_`` and ``.``, at most 64 characters (``.`` and ``..`` excepted:
clients and proxies resolve them as path segments)."""


ACTIVE = "active"
"""A subscription that delivers (a pulled one always is; a push one until disabled)."""
DISABLED = "disabled"
"""A push subscription whose receiver said it is gone: it delivers nothing more."""
PULL = "pull"
"""The delivery kind label of a subscription pulled over Server-Sent Events."""


def valid_name(name: str) -> bool:
    return NAME_RULE.fullmatch(name) is not None and name not in (".", "..")


@dataclass(slots=True, eq=False)
class SubscriptionEntry:
    """One subscription and its cursor."""

    owner: str | None
    name: str
    definition: Mapping[str, Any]
    """What the client put, as it will be compared and shown: ``event_type``, ``identifier``
    and, when given, ``from_id`` / ``from_date``."""
    created_at: str
    start_sequence: int
    """The first sequence it delivers: ``from_id``, the first stored at or after
    ``from_date``, or the first stored after its creation."""
    acknowledged: int | None = None
    """The highest sequence acknowledged; ``None`` before the first acknowledgement."""
    delivered: int = 0
    """The highest sequence written to one of its streams (what may be acknowledged)."""
    streams: set[StreamControl] = field(default_factory=set)
    """Its open event streams, stopped when it is deleted."""
    deleted: bool = False
    """Removed from the store: a stream set up meanwhile ends as soon as it starts."""
    push: PushState | None = None
    """Its push delivery; ``None`` for a subscription pulled over Server-Sent Events."""

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


class SubscriptionStore:
    """Every subscription of this process, by owner then name."""

    def __init__(self) -> None:
        self._by_owner: dict[str | None, dict[str, SubscriptionEntry]] = {}
        self.total = 0

    def get(self, owner: str | None, name: str) -> SubscriptionEntry | None:
        return self._by_owner.get(owner, {}).get(name)

    def owned(self, owner: str | None) -> list[SubscriptionEntry]:
        """The owner's subscriptions, by name."""
        entries = self._by_owner.get(owner, {})
        return [entries[name] for name in sorted(entries)]

    def census(self) -> Iterator[tuple[str, str, int | None]]:
        """Each subscription's delivery kind (``pull`` for a pulled one), its status and the
        storage time of the notification its push delivery holds undelivered, if any."""
        for entries in self._by_owner.values():
            for entry in entries.values():
                push = entry.push
                if push is None:
                    yield PULL, ACTIVE, None
                else:
                    yield push.kind.kind, push.status, push.holding_ns

    def count(self, owner: str | None) -> int:
        return len(self._by_owner.get(owner, {}))

    def add(self, entry: SubscriptionEntry) -> None:
        entries = self._by_owner.setdefault(entry.owner, {})
        assert entry.name not in entries
        entries[entry.name] = entry
        self.total += 1

    def remove(self, entry: SubscriptionEntry) -> None:
        entry.deleted = True
        entries = self._by_owner.get(entry.owner, {})
        if entries.pop(entry.name, None) is entry:
            self.total -= 1
            if not entries:
                del self._by_owner[entry.owner]
        for control in tuple(entry.streams):
            control.stop("end_of_stream")

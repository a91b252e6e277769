"""Aggregate counts: matching notifications counted per group of identifier values.

What is counted: distinct notifications, identified by their stored identifier (the
CloudEvent's ``data.identifier``). A re-publish of an identifier already counted changes
nothing, whether the backend kept both messages or only the newest one per subject, so the
counts read the same on every backend ("how many steps of this forecast have arrived").
"""

from __future__ import annotations

import json
from bisect import insort
from collections.abc import Mapping, Sequence
from hashlib import blake2b
from typing import Any

from aviso_plugins.service import SummaryLimitReached, TypeLayout, echoed
from aviso_plugins.topics import TopicDecodeError, decode_token
from aviso_plugins.types import InvalidValue, StoredNotification, stored_identifier

AGGREGATE = "aggregate"
DEFAULT_DEBOUNCE_MS = 1000
MAX_DEBOUNCE_MS = 60_000
GROUP_LIMIT_REACHED = "aggregate_group_limit_reached"

GroupKey = tuple[str | None, ...]

# JSON as aviso writes it: compact, keys sorted, raw UTF-8.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, sort_keys=True)
dumps = _ENCODER.encode


class GroupLimitReached(SummaryLimitReached):
    """Counting a notification would create one group more than the stream may hold: the
    stream ends with this ``error`` and ``connection-closing`` reason, without counts."""

    def __init__(self, max_groups: int) -> None:
        super().__init__(
            GROUP_LIMIT_REACHED,
            f"The aggregate would count more than {max_groups} groups "
            "(limits.max_aggregate_groups); narrow the identifier filter or group by fewer "
            "fields",
            "Aggregate exceeded its group limit",
            {"max_groups": max_groups},
        )


def _identity(record: StoredNotification) -> bytes:
    """What tells notifications apart (topic, identifier, and the spatial values stored
    apart from it), as a digest: a stream remembers every notification it counted, and
    what it keeps per notification must not grow with what a writer put in it (a polygon
    of a megabyte would otherwise be held by every aggregate stream that counted it)."""
    metadata = record.metadata
    digest = blake2b(digest_size=16)
    for part in (
        record.topic,
        metadata.get("identifier", ""),
        metadata.get("spatial_geometry", ""),
        metadata.get("spatial_point_cloud", ""),
    ):
        encoded = part.encode("utf-8", "surrogatepass")
        # Length-prefixed: two different splits of the same text must not read the same.
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return digest.digest()


def _value_order(value: str | None) -> tuple[int, int, str]:
    """Missing values first, then whole numbers numerically (steps 6 before 12), then text."""
    if value is None:
        return (0, 0, "")
    if value.isascii() and value.isdigit():
        return (1, int(value), value)
    return (2, 0, value)


def _group_order(key: GroupKey) -> tuple[tuple[int, int, str], ...]:
    return tuple(_value_order(value) for value in key)


class GroupCounts:
    """Distinct notifications per group of ``group_by`` values, at most ``max_groups``: the
    :class:`~aviso_plugins.service.Summary` of an aggregate stream.

    Rendering costs what changed, not what is held: groups are kept in their output order
    as they appear, and each group's JSON is rebuilt only when its count changed, so an
    update is a join of cached texts.
    """

    def __init__(
        self, group_by: Sequence[str], positions: Mapping[str, int], max_groups: int
    ) -> None:
        self.group_by = tuple(group_by)
        self.max_groups = max_groups
        # Topic token index of each grouped field in the topic: the fallback for records
        # stored without an identifier (other writers), as CloudEvents rebuild it.
        self._positions = {field: positions[field] for field in group_by if field in positions}
        self._seen: set[bytes] = set()
        self._counts: dict[GroupKey, int] = {}
        self._order: list[GroupKey] = []
        self._texts: dict[GroupKey, str] = {}
        self._dirty: set[GroupKey] = set()
        self.last_sequence: int | None = None

    event = AGGREGATE

    def add(self, record: StoredNotification) -> bool:
        """Count ``record``; ``True`` when a count changed (its identifier is new).

        Raises :class:`GroupLimitReached` instead of creating group ``max_groups + 1``.
        """
        self.last_sequence = record.sequence
        identity = _identity(record)
        if identity in self._seen:
            return False
        key = self._group_of(record)
        count = self._counts.get(key)
        if count is None:
            if len(self._counts) >= self.max_groups:
                raise GroupLimitReached(self.max_groups)
            insort(self._order, key, key=_group_order)
            count = 0
        self._seen.add(identity)
        self._counts[key] = count + 1
        self._dirty.add(key)
        return True

    def _group_of(self, record: StoredNotification) -> GroupKey:
        identifier = stored_identifier(record)
        tokens = record.topic.split(".")
        values: list[str | None] = []
        for field in self.group_by:
            value = identifier.get(field)
            position = self._positions.get(field)
            if value is None and position is not None and position < len(tokens):
                try:
                    value = decode_token(tokens[position]) or None
                except TopicDecodeError:
                    value = None
            values.append(value)
        return tuple(values)

    def json_text(self, extra: Mapping[str, Any]) -> str:
        """The event's JSON (compact, keys sorted, as aviso writes it): the counts plus
        ``extra`` members, whose keys must sort after ``groups``."""
        for key in self._dirty:
            values = dict(zip(self.group_by, key, strict=True))
            self._texts[key] = dumps({"count": self._counts[key], "values": values})
        self._dirty.clear()
        tail = dumps({**extra, "last_sequence": self.last_sequence, "total": len(self._seen)})
        groups = ",".join([self._texts[key] for key in self._order])
        return f'{{"group_by":{dumps(list(self.group_by))},"groups":[{groups}],{tail[1:]}'

    def render(self, members: Mapping[str, Any]) -> bytes:
        return self.json_text(members).encode()


def plan_group_counts(
    layout: TypeLayout | None,
    identifier: Mapping[str, Any],
    group_by: Sequence[str],
    max_groups: int,
) -> GroupCounts:
    """Validate ``group_by`` against the event type's identifier fields.

    Schema-backed: any declared identifier field. Schema-less (permissive mode): a key of
    the request's own identifier, since those keys are what positions a generic topic.
    """
    if layout is not None:
        allowed = list(layout.fields)
        positions = {field: index + 1 for index, field in enumerate(layout.topic_fields)}
        owner = f"event type '{layout.event_type}'"
    else:
        allowed = sorted(identifier)
        positions = {field: index + 1 for index, field in enumerate(allowed)}
        owner = "the request identifier"
    if not group_by:
        raise InvalidValue("group_by must name at least one identifier field")
    for index, field in enumerate(group_by):
        if field not in allowed:
            raise InvalidValue(
                f"group_by field '{echoed(field)}' is not an identifier field of {owner}. "
                f"Allowed fields: {', '.join(allowed)}"
            )
        if field in group_by[:index]:
            raise InvalidValue(f"group_by names field '{field}' more than once")
    return GroupCounts(group_by, positions, max_groups)


def check_debounce(debounce_ms: int, minimum: int) -> None:
    """``minimum`` is ``limits.min_aggregate_debounce_ms``: a shorter window would let one
    stream render its counts for every notification."""
    if not minimum <= debounce_ms <= MAX_DEBOUNCE_MS:
        raise InvalidValue(
            f"debounce_ms must be between {minimum} and {MAX_DEBOUNCE_MS}. Got: {debounce_ms}"
        )

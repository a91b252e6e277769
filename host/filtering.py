"""The in-process part of stream filtering: constraints, scalar filters off the topic, and
spatial tests. Topic-pattern matching happens first, in the backend (cheap token compare);
shapely runs last and only on what survived.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shapely import Point, Polygon, prepared

from aviso_plugins.geometry import parse_polygon_text
from aviso_plugins.topics import TopicDecodeError, TopicPattern, decode_token
from aviso_plugins.types import ConstraintPredicate, StoredNotification

WILDCARD = "*"


def stored_identifier(record: StoredNotification) -> dict[str, str]:
    """The canonical identifier stored with a notification (empty if it predates that)."""
    raw = record.metadata.get("identifier")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class FieldFilter:
    """A predicate on one field's stored canonical value.

    ``position`` is the field's token index in the topic, or ``None`` for fields outside
    the topic, which are read from the stored identifier instead.
    """

    field: str
    position: int | None
    predicate: ConstraintPredicate

    def accepts(self, record: StoredNotification, identifier: dict[str, str] | None) -> bool:
        if self.position is not None:
            try:
                value = decode_token(record.topic.split(".")[self.position])
            except (IndexError, TopicDecodeError):
                return False
        else:
            value = (identifier or {}).get(self.field, "")
        return bool(value) and value != WILDCARD and self.predicate(value)


def _polygon(points: Sequence[tuple[float, float]]) -> Polygon:
    # Coordinates arrive latitude first; geometry is computed with x = lon, y = lat.
    return Polygon([(lon, lat) for lat, lon in points])


def _bbox(record: StoredNotification) -> tuple[float, float, float, float] | None:
    raw = record.metadata.get("spatial_bbox")
    if not raw:
        return None
    try:
        min_lat, min_lon, max_lat, max_lon = (float(part) for part in raw.split(","))
    except ValueError:
        return None
    return min_lon, min_lat, max_lon, max_lat


def _record_polygon(record: StoredNotification) -> Polygon | None:
    text = record.metadata.get("spatial_geometry")
    if text is None:
        return _payload_polygon(record.payload)
    try:
        return _polygon(parse_polygon_text(text))
    except ValueError:
        return None


def _payload_polygon(payload: str) -> Polygon | None:
    """Compatibility fallback: a top-level ``spatial_geometry`` member of the payload."""
    try:
        geometry: Any = json.loads(payload).get("spatial_geometry")
    except (ValueError, AttributeError):
        return None
    try:
        if isinstance(geometry, str):
            return _polygon(parse_polygon_text(geometry))
        if isinstance(geometry, dict) and geometry.get("type") == "Polygon":
            ring = geometry["coordinates"][0]
            if len(ring) >= 3:
                return _polygon([(float(lat), float(lon)) for lat, lon in ring])
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return None


class SpatialFilter:
    """Point-in-polygon (interior only) or polygon-intersects-polygon (touching counts)."""

    def __init__(self, geometry: Point | Polygon, needs_bbox: bool) -> None:
        self._geometry = geometry
        self._prepared = prepared.prep(geometry)
        self._bounds = geometry.bounds
        self._needs_bbox = needs_bbox

    @classmethod
    def for_point(cls, point: tuple[float, float]) -> SpatialFilter:
        lat, lon = point
        return cls(Point(lon, lat), needs_bbox=False)

    @classmethod
    def for_polygon(cls, points: Sequence[tuple[float, float]]) -> SpatialFilter:
        return cls(_polygon(points), needs_bbox=True)

    def accepts(self, record: StoredNotification) -> bool:
        bbox = _bbox(record)
        if bbox is None and self._needs_bbox:
            return False
        if bbox is not None and not _boxes_touch(bbox, self._bounds):
            return False
        polygon = _record_polygon(record)
        if polygon is None:
            return False
        if isinstance(self._geometry, Point):
            return polygon.contains(self._geometry)
        return self._prepared.intersects(polygon)


def _boxes_touch(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """Everything a watch/replay stream asks of a notification."""

    event_type: str
    pattern: TopicPattern
    fields: tuple[FieldFilter, ...] = ()
    spatial: SpatialFilter | None = None
    requested: Mapping[str, str] = field(default_factory=dict)
    """The canonical value of every field the request named (``*`` kept, constraint objects
    as compact JSON): what stream authorisers compare against, literally."""

    def accepts(self, record: StoredNotification) -> bool:
        """Assumes the backend already matched ``pattern``."""
        if self.fields:
            identifier = (
                stored_identifier(record)
                if any(item.position is None for item in self.fields)
                else None
            )
            if not all(item.accepts(record, identifier) for item in self.fields):
                return False
        return self.spatial is None or self.spatial.accepts(record)

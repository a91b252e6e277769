"""The in-process part of stream filtering: constraints, scalar filters off the topic, and
spatial tests. Topic-pattern matching happens first, in the backend (cheap token compare);
shapely runs last and only on what survived.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import shapely
from shapely import Point, Polygon

from aviso_plugins._shared.geometry import MIN_POLYGON_PAIRS, parse_polygon_value
from aviso_plugins.storage import stored_identifier
from aviso_plugins.topics import TopicDecodeError, TopicPattern, decode_token
from aviso_plugins.types import ConstraintPredicate, StoredNotification

WILDCARD = "*"

INLINE_SPATIAL_CHARS = 200_000
"""Stored geometry (characters) one batch may match on the event loop: about 10,000
vertices, a few milliseconds of parsing."""

# Shared by every stream: a bounded pool keeps many heavy replays from multiplying threads.
_SPATIAL_WORKERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aviso-spatial")


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


def stored_coordinates(text: str) -> np.ndarray | None:
    """``(N, 2)`` longitude/latitude columns of a stored polygon or point cloud.

    Stored values were validated on notify, so numpy's parser is used instead of the
    request grammar (it is several times faster on 10,000-vertex polygons); text that is
    not two numbers per pair (another writer's) gives ``None``.
    """
    body = text.strip()
    try:
        if body.startswith("["):
            values = np.asarray(json.loads(body), dtype=float)
        else:
            values = np.array(body.strip("()").split(","), dtype=float)
        pairs = values.reshape(-1, 2)
    except (ValueError, TypeError):
        return None
    return pairs[:, ::-1] if len(pairs) and np.isfinite(pairs).all() else None


def _record_polygon(record: StoredNotification) -> Polygon | None:
    text = record.metadata.get("spatial_geometry")
    if text is None:
        return _payload_polygon(record.payload)
    coordinates = stored_coordinates(text)
    if coordinates is None or len(coordinates) < MIN_POLYGON_PAIRS:
        return None
    return shapely.polygons(coordinates)


def _payload_polygon(payload: str) -> Polygon | None:
    """Compatibility fallback: a top-level ``spatial_geometry`` member of the payload."""
    try:
        geometry: Any = json.loads(payload).get("spatial_geometry")
    except (ValueError, AttributeError):
        return None
    try:
        if isinstance(geometry, str):
            return _polygon(parse_polygon_value(geometry))
        if isinstance(geometry, dict) and geometry.get("type") == "Polygon":
            ring = geometry["coordinates"][0]
            if len(ring) >= 3:
                return _polygon([(float(lat), float(lon)) for lat, lon in ring])
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return None


class SpatialFilter:
    """Point-in-polygon (interior only), polygon-intersects-polygon (touching counts), or
    polygon-covers-any-point of a point cloud (edges and vertices count).

    The filter geometry is prepared once (GEOS builds its indexes), and every stored
    geometry is rejected on its bounding box before it is parsed.
    """

    def __init__(self, geometry: Point | Polygon, needs_bbox: bool) -> None:
        self._geometry = geometry
        shapely.prepare(geometry)
        self._bounds = geometry.bounds
        self._needs_bbox = needs_bbox

    @classmethod
    def for_point(cls, point: tuple[float, float]) -> SpatialFilter:
        lat, lon = point
        return cls(Point(lon, lat), needs_bbox=False)

    @classmethod
    def for_polygon(cls, points: Sequence[tuple[float, float]]) -> SpatialFilter:
        return cls(_polygon(points), needs_bbox=True)

    @staticmethod
    def cost(record: StoredNotification) -> int:
        """Characters of stored geometry a match may have to parse: the work estimate."""
        metadata = record.metadata
        return len(metadata.get("spatial_geometry") or metadata.get("spatial_point_cloud", ""))

    def accepts(self, record: StoredNotification) -> bool:
        bbox = _bbox(record)
        if bbox is None and self._needs_bbox:
            return False
        if bbox is not None and not _boxes_touch(bbox, self._bounds):
            return False
        try:
            cloud = record.metadata.get("spatial_point_cloud")
            if cloud is not None:
                return self._covers_a_point(cloud)
            polygon = _record_polygon(record)
            if polygon is None:
                return False
            if isinstance(self._geometry, Point):
                return bool(polygon.contains(self._geometry))
            return bool(shapely.intersects(self._geometry, polygon))
        except shapely.errors.GEOSException:
            return False  # a stored ring GEOS cannot evaluate matches nothing

    def _covers_a_point(self, cloud: str) -> bool:
        if isinstance(self._geometry, Point):
            return False  # point filters are refused on point-cloud schemas
        points = stored_coordinates(cloud)
        if points is None:
            return False
        return bool(shapely.intersects_xy(self._geometry, points[:, 0], points[:, 1]).any())


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

    async def select(self, records: Sequence[StoredNotification]) -> list[StoredNotification]:
        """The accepted records, in order; the way streams filter a batch.

        Spatial matching of a batch that may parse more than ``INLINE_SPATIAL_CHARS`` of
        stored geometry runs on the spatial worker threads instead of the event loop
        (shapely and numpy release the GIL for most of it), so one request replaying large
        polygons cannot stall every other client. A stream awaits one batch at a time, so
        each request occupies at most one worker.
        """
        if self.spatial is None or sum(map(SpatialFilter.cost, records)) <= INLINE_SPATIAL_CHARS:
            return self._select_now(records)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_SPATIAL_WORKERS, self._select_now, records)

    def _select_now(self, records: Sequence[StoredNotification]) -> list[StoredNotification]:
        return [record for record in records if self.accepts(record)]

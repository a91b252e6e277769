"""Coordinate grammars: polygons, the reserved ``point`` key and point clouds.

Coordinates are written latitude first. A polygon or point arrives as a JSON array
(``[[lat, lon], ...]``, ``[lat, lon]``), as the legacy text ``lat,lon,...`` or as a string
holding the JSON array. Parsers raise ``ValueError`` whose message is a client-safe reason;
callers prefix it with the field name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from aviso_plugins._shared.numbers import parse_decimal_text

Coordinate = tuple[float, float]
"""A ``(latitude, longitude)`` pair in degrees."""

MIN_POLYGON_PAIRS = 4
MAX_STORED_COORDINATES_BYTES = 61_440
EXAMPLE_POLYGON: tuple[Coordinate, ...] = (
    (47.0, 8.0),
    (47.6, 8.0),
    (47.6, 8.9),
    (47.0, 8.9),
    (47.0, 8.0),
)
"""A small closed ring (around Zurich, latitude first), for documentation examples."""
EXAMPLE_POINT: Coordinate = (47.3, 8.5)
"""A point inside :data:`EXAMPLE_POLYGON`."""
"""Canonical bytes of one stored polygon or point cloud: aviso-server's point-cloud limit
(``MAX_SERIALIZED_POINT_CLOUD_BYTES``, 60 KiB), which keeps the value inside one 64 KiB
JetStream header block; the same on every backend."""
_LATITUDE_LIMIT = 90.0
_LONGITUDE_LIMIT = 180.0
_NUMBER_TYPES = {int, float}
_COMPACT = json.JSONEncoder(separators=(",", ":"))


def parse_polygon_value(value: Any, max_vertices: int | None = None) -> list[Coordinate]:
    """A polygon in any accepted form: JSON array of pairs, legacy text or JSON-array text.

    ``max_vertices`` bounds the number of pairs (the closing pair included); it is checked
    before any coordinate is converted.
    """
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            value = _json_array(value, "polygon")
        else:
            return parse_polygon_text(value, max_vertices)
    if not isinstance(value, list):
        raise ValueError(f"must be an array of [lat, lon] pairs or a string, got {_kind(value)}")
    _check_count(len(value), max_vertices)
    return _closed_ring(_pairs(value))


def parse_point_value(value: Any) -> Coordinate:
    """A point as ``[lat, lon]``, the text ``lat,lon`` or a string holding the JSON array."""
    if isinstance(value, str):
        if not value.lstrip().startswith("["):
            return parse_point_text(value)
        value = _json_array(value, "point")
    if not isinstance(value, list):
        raise ValueError(f"must be a [lat, lon] array or a string, got {_kind(value)}")
    return _pair(value, None)


def parse_point_cloud_value(value: Any) -> list[Coordinate]:
    """A non-empty JSON array of ``[lat, lon]`` pairs; order and duplicates are kept."""
    if not isinstance(value, list):
        raise ValueError(f"must be a JSON array of [lat, lon] pairs, got {_kind(value)}")
    if not value:
        raise ValueError("point cloud must contain at least one point")
    return _pairs(value)


def coordinates_json(points: Sequence[Coordinate]) -> str:
    """The canonical compact JSON of ``[[lat, lon], ...]`` (shortest round-trip floats)."""
    return _COMPACT.encode(points)


def parse_polygon_text(text: str, max_vertices: int | None = None) -> list[Coordinate]:
    """Parse ``lat,lon,lat,lon,…`` (optionally in one pair of parentheses) into vertices.

    At least four pairs, closed (first pair numerically equal to the last); no other
    geometry check is made.
    """
    body = text.strip()
    if not body:
        raise ValueError("polygon cannot be empty")
    opens, closes = body.startswith("("), body.endswith(")")
    if opens != closes:
        raise ValueError("unbalanced parentheses")
    if opens:
        body = body[1:-1]
    if "(" in body or ")" in body:
        raise ValueError("nested parentheses are not allowed")
    body = body.strip()
    if not body:
        raise ValueError("polygon has no coordinates")
    parts = body.split(",")
    if len(parts) % 2:
        raise ValueError(f"odd number of coordinate values ({len(parts)})")
    _check_count(len(parts) // 2, max_vertices)
    points = [_coordinate(lat, lon) for lat, lon in zip(parts[::2], parts[1::2], strict=True)]
    return _closed_ring(points)


def _closed_ring(points: list[Coordinate]) -> list[Coordinate]:
    if len(points) < MIN_POLYGON_PAIRS:
        raise ValueError(
            f"at least {MIN_POLYGON_PAIRS} coordinate pairs required, got {len(points)}"
        )
    if points[0] != points[-1]:
        raise ValueError("polygon is not closed: the first and last pairs differ")
    return points


def parse_point_text(text: str) -> Coordinate:
    """Parse ``lat,lon`` (optionally in parentheses) as used by the reserved ``point`` key."""
    body = text.strip()
    if not body:
        raise ValueError("point cannot be empty")
    # Unlike polygons, a lone parenthesis is kept and then fails as a number.
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1].strip()
    parts = body.split(",")
    if len(parts) != 2:
        raise ValueError(f"expected exactly two values 'lat,lon', got {len(parts)}")
    return _coordinate(*parts)


def bounding_box(points: Iterable[Coordinate]) -> tuple[float, float, float, float]:
    """``(min_lat, min_lon, max_lat, max_lon)`` of at least one point."""
    lats, lons = zip(*points, strict=True)
    return min(lats), min(lons), max(lats), max(lons)


def _check_count(vertices: int, max_vertices: int | None) -> None:
    if max_vertices is not None and vertices > max_vertices:
        raise ValueError(
            f"polygon has {vertices} vertices, maximum is {max_vertices} "
            "(limits.max_polygon_vertices)"
        )


def _json_array(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # The parser's own wording is not for clients: say where, in our words.
        where = f" (at line {exc.lineno}, column {exc.colno})"
    except ValueError:  # an integer beyond Python's digit limit
        where = " (a number has too many digits)"
    except RecursionError:
        where = " (nested too deeply)"
    raise ValueError(f"{what} string starting with '[' is not valid JSON{where}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "string"


def _pairs(items: list[Any]) -> list[Coordinate]:
    """Validated pairs: vectorised for the common case (10,000 pairs in about a
    millisecond), pair by pair when something is wrong, to name the first culprit."""
    # Imported on first use: discovering plugins (`aviso-server --help`) imports this
    # module, and numpy costs about a tenth of a second to import.
    import numpy as np

    if (
        items
        and all(type(item) is list and len(item) == 2 for item in items)
        and {type(number) for item in items for number in item} <= _NUMBER_TYPES
    ):
        try:
            values = np.asarray(items, dtype=float)
        except OverflowError:
            values = None
        if (
            values is not None
            and np.isfinite(values).all()
            and (np.abs(values[:, 0]) <= _LATITUDE_LIMIT).all()
            and (np.abs(values[:, 1]) <= _LONGITUDE_LIMIT).all()
        ):
            return list(map(tuple, values.tolist()))
    return [_pair(item, index) for index, item in enumerate(items)]


def _pair(item: Any, index: int | None) -> Coordinate:
    where = "" if index is None else f" at index {index}"
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError(f"expected a [lat, lon] pair{where}, got {_pair_kind(item)}")
    lat, lon = item
    if not _is_number(lat) or not _is_number(lon):
        raise ValueError(f"coordinates must be numbers{where}")
    try:
        lat, lon = float(lat), float(lon)
    except OverflowError:
        raise ValueError(f"coordinates must be finite{where}") from None
    if not math.isfinite(lat) or not math.isfinite(lon):
        raise ValueError(f"coordinates must be finite{where}")
    if not -_LATITUDE_LIMIT <= lat <= _LATITUDE_LIMIT:
        raise ValueError(f"latitude {lat!r}{where} is outside [-90, 90]")
    if not -_LONGITUDE_LIMIT <= lon <= _LONGITUDE_LIMIT:
        raise ValueError(f"longitude {lon!r}{where} is outside [-180, 180]")
    return lat, lon


def _pair_kind(item: Any) -> str:
    return f"an array of {len(item)} values" if isinstance(item, list) else _kind(item)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _coordinate(lat_text: str, lon_text: str) -> Coordinate:
    lat = _number(lat_text)
    lon = _number(lon_text)
    # Written as "not inside" so that NaN, which compares false, is rejected too.
    if not -_LATITUDE_LIMIT <= lat <= _LATITUDE_LIMIT:
        raise ValueError(f"latitude {lat_text.strip()} is outside [-90, 90]")
    if not -_LONGITUDE_LIMIT <= lon <= _LONGITUDE_LIMIT:
        raise ValueError(f"longitude {lon_text.strip()} is outside [-180, 180]")
    return lat, lon


def _number(text: str) -> float:
    value = text.strip()
    try:
        return parse_decimal_text(value)
    except ValueError as exc:
        raise ValueError(f"invalid coordinate '{value}': {exc}") from exc

"""Coordinate text grammars: notification polygons and the reserved ``point`` key.

Coordinates are written latitude first. Parsers raise ``ValueError`` whose message is a
client-safe reason; callers prefix it with the field name.
"""

from __future__ import annotations

from collections.abc import Iterable

from aviso_plugins.numbers import parse_decimal_text

Coordinate = tuple[float, float]
"""A ``(latitude, longitude)`` pair in degrees."""

MIN_POLYGON_PAIRS = 4
_LATITUDE_LIMIT = 90.0
_LONGITUDE_LIMIT = 180.0


def parse_polygon_text(text: str) -> list[Coordinate]:
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
    points = [_coordinate(lat, lon) for lat, lon in zip(parts[::2], parts[1::2], strict=True)]
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

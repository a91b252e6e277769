"""The ``point_cloud`` field: notifications carrying many points, matched by polygons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_plugins import hookimpl
from aviso_plugins._shared.geometry import (
    MAX_STORED_COORDINATES_BYTES,
    Coordinate,
    coordinates_json,
    parse_point_cloud_value,
)
from aviso_plugins.types import FieldHandler, InvalidValue

MAX_POINT_CLOUD_POINTS = 10_000
"""Upper bound (and default) of a point-cloud field's ``max_points``."""

MAX_POINT_CLOUD_JSON_BYTES = MAX_STORED_COORDINATES_BYTES
"""aviso-server's ``MAX_SERIALIZED_POINT_CLOUD_BYTES`` (60 KiB of canonical JSON)."""


class PointCloudHandler(FieldHandler):
    """A non-empty JSON array of ``[lat, lon]`` points, notified only.

    Subscribers send a ``polygon`` instead; a notification matches when any of its points
    lies inside the polygon or on its boundary. The canonical value is the compact JSON.
    """

    type_name = "PointCloudHandler"
    value_kind = "point"
    spatial = True
    point_cloud = True
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "max_points": {"type": "integer", "minimum": 1, "maximum": MAX_POINT_CLOUD_POINTS}
    }

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.max_points: int = definition.get("max_points", MAX_POINT_CLOUD_POINTS)

    def canonicalise(self, text: str) -> str:
        raise InvalidValue(
            f"field '{self.field}' must be a valid point cloud: "
            "must be a JSON array of [lat, lon] pairs, got string"
        )

    def canonicalise_value(self, value: Any, max_vertices: int | None) -> str:
        if isinstance(value, list) and len(value) > self.max_points:
            raise InvalidValue(
                f"field '{self.field}' point cloud contains {len(value)} points, "
                f"maximum is {self.max_points}"
            )
        canonical = coordinates_json(self._parse(value))
        size = len(canonical.encode())
        if size > MAX_POINT_CLOUD_JSON_BYTES:
            raise InvalidValue(
                f"field '{self.field}' point cloud canonical JSON is {size} bytes, "
                f"maximum is {MAX_POINT_CLOUD_JSON_BYTES} bytes"
            )
        return canonical

    def example_value(self) -> list[list[float]]:
        return [[47.3, 8.5], [47.4, 8.6]]

    def _parse(self, value: Any) -> list[Coordinate]:
        try:
            return parse_point_cloud_value(value)
        except ValueError as exc:
            raise InvalidValue(
                f"field '{self.field}' must be a valid point cloud: {exc}", str(exc)
            ) from exc


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [PointCloudHandler]

"""The polygon field that drives spatial filtering."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aviso_plugins import hookimpl
from aviso_plugins._shared.geometry import (
    EXAMPLE_POLYGON,
    Coordinate,
    coordinates_json,
    parse_polygon_value,
)
from aviso_plugins.types import FieldHandler, InvalidValue


class PolygonHandler(FieldHandler):
    """Closed rings of ``[lat, lon]`` pairs.

    The canonical value of the legacy text form ``lat,lon,...`` is the submitted text,
    unchanged, so topics stay what aviso-server 0.7.1 built; an array (or a string holding
    one) becomes its compact JSON with float numbers. Delivered CloudEvents always show
    the array.
    """

    type_name = "PolygonHandler"
    value_kind = "polygon"
    spatial = True

    def canonicalise(self, text: str) -> str:
        return self.canonicalise_value(text, None)

    def canonicalise_value(self, value: Any, max_vertices: int | None) -> str:
        points = self._parse(value, max_vertices)
        if isinstance(value, str) and not value.lstrip().startswith("["):
            return value
        return coordinates_json(points)

    def example_value(self) -> list[list[float]]:
        return [list(point) for point in EXAMPLE_POLYGON]

    def polygon(self, canonical: str) -> Sequence[Coordinate]:
        return self._parse(canonical, None)

    def _parse(self, value: Any, max_vertices: int | None) -> list[Coordinate]:
        try:
            return parse_polygon_value(value, max_vertices)
        except ValueError as exc:
            raise InvalidValue(
                f"field '{self.field}' must be a valid polygon: {exc}", str(exc)
            ) from exc


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [PolygonHandler]

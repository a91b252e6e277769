"""The polygon field that drives spatial filtering."""

from __future__ import annotations

from collections.abc import Sequence

from aviso_plugins import hookimpl
from aviso_plugins.geometry import Coordinate, parse_polygon_text
from aviso_plugins.types import FieldHandler, InvalidValue


class PolygonHandler(FieldHandler):
    """Closed ``lat,lon,…`` rings; the canonical value is the submitted text, unchanged."""

    type_name = "PolygonHandler"
    spatial = True

    def canonicalise(self, text: str) -> str:
        self._parse(text)
        return text

    def polygon(self, canonical: str) -> Sequence[Coordinate]:
        return self._parse(canonical)

    def _parse(self, text: str) -> list[Coordinate]:
        try:
            return parse_polygon_text(text)
        except ValueError as exc:
            raise InvalidValue(
                f"field '{self.field}' must be a valid polygon: {exc}", str(exc)
            ) from exc


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [PolygonHandler]

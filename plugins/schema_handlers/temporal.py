"""Calendar dates and times of day."""

from __future__ import annotations

import calendar
import datetime
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from aviso_plugins import hookimpl
from aviso_plugins.types import FieldHandler, InvalidValue

DEFAULT_DATE_FORMAT = "%Y%m%d"
_DATE_TEMPLATES = {
    "%Y%m%d": "{:04d}{:02d}{:02d}",
    "%Y-%m-%d": "{:04d}-{:02d}-{:02d}",
}

# Each component skips the whitespace before it and reads as many ASCII digits as it may.
# The quantifiers are possessive because a component never gives digits back: "202512"
# is year 2025, month 12 and no day (invalid), not year 2025, month 1, day 2.
_YEAR = r"\s*([0-9]{1,4}+)"
_MONTH_OR_DAY = r"\s*([0-9]{1,2}+)"
_ORDINAL = r"\s*([0-9]{1,3}+)"

_HOUR_ONLY = re.compile(r"[0-9]{1,2}")
_HOUR_COLON_MINUTE = re.compile(r"([0-9]{1,2}):([0-9]{2})")
_HOUR_MINUTE = re.compile(r"([0-9]{2})([0-9]{2})")

Date = tuple[int, int, int]


class DateHandler(FieldHandler):
    """Dates written ``Y-M-D``, ``YMD`` or ``Y-O`` (ordinal); canonical per ``canonical_format``."""

    type_name = "DateHandler"
    value_kind = "date"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "canonical_format": {"type": "string"},
    }

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        self.canonical_format: str = definition.get("canonical_format", DEFAULT_DATE_FORMAT)
        if self.canonical_format not in _DATE_TEMPLATES:
            raise ValueError(
                f"DateHandler 'canonical_format' must be one of {sorted(_DATE_TEMPLATES)}, "
                f"got {self.canonical_format!r}"
            )
        self._template = _DATE_TEMPLATES[self.canonical_format]

    def canonicalise(self, text: str) -> str:
        date = _parse_date(text)
        if date is None:
            raise InvalidValue(
                f"Field '{self.field}' must be a valid date (YYYY-MM-DD, YYYYMMDD or "
                f"YYYY-DDD), got: '{text}'"
            )
        return self._template.format(*date)

    def example_value(self) -> str:
        today = datetime.datetime.now(datetime.UTC).date()
        return self._template.format(today.year, today.month, today.day)

    def describe(self) -> dict[str, Any]:
        # Show the format actually applied: the default is part of the contract, and a
        # null would leave clients guessing.
        return {**super().describe(), "canonical_format": self.canonical_format}


class TimeHandler(FieldHandler):
    """Times of day as ``H``, ``HH``, ``H:MM``, ``HH:MM`` or ``HHMM``; canonical ``HHMM``."""

    type_name = "TimeHandler"
    value_kind = "time"

    def canonicalise(self, text: str) -> str:
        time = _parse_time(text)
        if time is None:
            raise InvalidValue(
                f"Field '{self.field}' must be a valid time (H, HH, H:MM, HH:MM or HHMM), "
                f"got: '{text}'"
            )
        return "{:02d}{:02d}".format(*time)

    def example_value(self) -> str:
        return "1200"


def _parse_date(text: str) -> Date | None:
    """``(year, month, day)`` of the first layout that matches the whole text and is a real date."""
    for layout, build in _DATE_LAYOUTS:
        match = layout.fullmatch(text)
        date = None if match is None else build(*map(int, match.groups()))
        if date is not None:
            return date
    return None


def _from_month_day(year: int, month: int, day: int) -> Date | None:
    if 1 <= month <= 12 and 1 <= day <= _days_in_month(year, month):
        return year, month, day
    return None


def _from_ordinal(year: int, ordinal: int) -> Date | None:
    if ordinal < 1:
        return None
    for month in range(1, 13):
        length = _days_in_month(year, month)
        if ordinal <= length:
            return year, month, ordinal
        ordinal -= length
    return None


def _days_in_month(year: int, month: int) -> int:
    # Computed by hand rather than with datetime, which has no year 0 (a valid,
    # leap, proleptic Gregorian year that the four-digit grammar admits).
    if month == 2:
        return 29 if calendar.isleap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


_DATE_LAYOUTS: tuple[tuple[re.Pattern[str], Callable[..., Date | None]], ...] = (
    (re.compile(f"{_YEAR}-{_MONTH_OR_DAY}-{_MONTH_OR_DAY}"), _from_month_day),
    (re.compile(f"{_YEAR}{_MONTH_OR_DAY}{_MONTH_OR_DAY}"), _from_month_day),
    (re.compile(f"{_YEAR}-{_ORDINAL}"), _from_ordinal),
)


def _parse_time(text: str) -> tuple[int, int] | None:
    if _HOUR_ONLY.fullmatch(text):
        hour, minute = int(text), 0
    else:
        pattern = _HOUR_COLON_MINUTE if ":" in text else _HOUR_MINUTE
        match = pattern.fullmatch(text)
        if match is None:
            return None
        hour, minute = map(int, match.groups())
    return (hour, minute) if hour < 24 and minute < 60 else None


@hookimpl
def aviso_field_handlers() -> list[type[FieldHandler]]:
    return [DateHandler, TimeHandler]

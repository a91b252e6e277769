"""The cursor grammar of watch and replay: ``from_id`` / ``from_date`` and the replay end
point ``to_id`` / ``to_date``.

Python's ``int()`` and ``datetime.fromisoformat`` accept far more than the contract allows
(spaces, underscores, non-ASCII digits, date-only strings), so both are parsed with explicit
patterns first.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

from aviso_host.logs import echoed

_FROM_ID = re.compile(r"\+?[0-9]+", re.ASCII)
_EPOCH = re.compile(r"\+?([0-9]+)", re.ASCII)
_NEGATIVE_EPOCH = re.compile(r"-[0-9]+", re.ASCII)
_DATETIME = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ](?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<fraction>[0-9]+))?(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})?",
    re.ASCII,
)
_U64_MAX = 2**64 - 1
_U64_DIGITS = len(str(_U64_MAX))
_I64_MAX = 2**63 - 1
_I64_DIGITS = len(str(_I64_MAX))
_EPOCH_START = datetime(1970, 1, 1, tzinfo=UTC)
_DATE_EXAMPLES = (
    "Valid examples: '2025-06-09T13:15:00Z', '2025-06-09 13:15:00+00:00', "
    "'2025-06-09 13:15:00', '1740509903', '1740509903710'"
)


class CursorError(ValueError):
    """A start cursor is invalid; the message is the client-facing text."""


def parse_from_id(raw: str) -> int:
    return _parse_id(raw, "from_id")


def parse_to_id(raw: str) -> int:
    return _parse_id(raw, "to_id")


def _parse_id(raw: str, name: str) -> int:
    if not raw.strip():
        raise CursorError(
            f"{name} cannot be empty. Provide a valid sequence number or omit the field"
        )
    value = parse_u64(raw)
    if value is None:
        raise CursorError(
            f"{name} must be a valid positive integer. Got: '{echoed(raw)}'. "
            "Valid examples: '1', '123', '9999'"
        )
    return value


def parse_u64(text: str) -> int | None:
    """``text`` (digits, ``+`` and leading zeros allowed) as an unsigned 64-bit integer, or
    ``None``: a sequence number, as the reference server reads one."""
    # The length check comes first: int() refuses (with its own error) strings of
    # thousands of digits, and nothing longer than u64's 20 digits can be in range.
    if not _FROM_ID.fullmatch(text) or len(text.lstrip("+").lstrip("0")) > _U64_DIGITS:
        return None
    value = int(text)
    return value if value <= _U64_MAX else None


def parse_from_date(raw: str) -> datetime:
    """Return a timezone-aware UTC datetime (microsecond precision)."""
    return _parse_date(raw, "from_date")


def parse_to_date(raw: str) -> datetime:
    return _parse_date(raw, "to_date")


def _parse_date(raw: str, name: str) -> datetime:
    text = raw.strip()
    if not text:
        raise CursorError(
            f"{name} cannot be empty. Provide a valid datetime/timestamp or omit the field"
        )
    try:
        return _parse_date_text(text)
    except ValueError as exc:
        raise CursorError(
            f"{name} must be a valid datetime/timestamp. Got: '{echoed(raw)}'. Error: {exc}. "
            f"{_DATE_EXAMPLES}"
        ) from exc


def rfc3339(moment: datetime) -> str:
    """``+00:00`` form with as many fraction digits as needed (0, 3 or 6), as the reference
    server prints a date in its messages."""
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    micro = moment.microsecond
    if micro:
        text += f".{micro // 1000:03d}" if micro % 1000 == 0 else f".{micro:06d}"
    return text + "+00:00"


def _parse_date_text(text: str) -> datetime:
    if _NEGATIVE_EPOCH.fullmatch(text):
        raise ValueError(f"negative unix timestamps are not supported: '{echoed(text)}'")
    epoch = _EPOCH.fullmatch(text)
    if epoch:
        return _from_epoch(text, epoch.group(1))
    match = _DATETIME.fullmatch(text)
    if not match:
        raise ValueError(
            "expected ISO-8601 datetime (RFC3339/space-separated with optional timezone) "
            "or unix epoch seconds/milliseconds"
        )
    try:
        moment = datetime.strptime(f"{match['date']} {match['time']}", "%Y-%m-%d %H:%M:%S")
    except ValueError:  # the calendar's own wording is not for clients
        raise ValueError("the date or time is not a valid calendar date or time") from None
    fraction = (match["fraction"] or "")[:6].ljust(6, "0")
    moment = moment.replace(microsecond=int(fraction))
    offset = match["offset"]
    if offset is None or offset in "Zz":
        return moment.replace(tzinfo=UTC)
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"invalid timezone offset '{offset}'")
    sign = 1 if offset[0] == "+" else -1
    try:
        return (moment - sign * timedelta(hours=hours, minutes=minutes)).replace(tzinfo=UTC)
    except OverflowError as exc:
        raise ValueError("date out of range once its timezone offset is applied") from exc


def _from_epoch(text: str, digits: str) -> datetime:
    if len(digits.lstrip("0")) > _I64_DIGITS or int(digits) > _I64_MAX:
        raise ValueError("failed to parse unix timestamp: number too large")
    value = int(digits)
    significant = len(digits.lstrip("0")) or 1
    try:
        if significant <= 11:
            return _EPOCH_START + timedelta(seconds=value)
        return _EPOCH_START + timedelta(milliseconds=value)
    except OverflowError as exc:
        unit = "seconds" if significant <= 11 else "milliseconds"
        raise ValueError(f"invalid unix {unit} timestamp: out of range") from exc


_last_formatted: tuple[int, str] = (-1, "")
"""The last second :func:`now_whole_seconds` formatted: every notify answer carries it."""


def now_whole_seconds() -> str:
    """The current time as a control-event timestamp."""
    global _last_formatted
    second = int(time.time())
    if _last_formatted[0] != second:
        _last_formatted = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _last_formatted[1]


def whole_seconds(moment: datetime) -> str:
    """Control-event timestamp: UTC, truncated to whole seconds, ``Z`` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_ns(moment: datetime) -> int:
    delta = moment - _EPOCH_START
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000

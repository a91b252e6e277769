"""Duration and size literals.

Both grammars are deliberately narrow (one integer, one unit, no spaces in between) so a
value means the same thing here as in aviso-server.
"""

from __future__ import annotations

import re

_U64_MAX = 2**64 - 1
_I64_MAX = 2**63 - 1

_DURATION = re.compile(r"([0-9]+)([smhdw])", re.ASCII | re.IGNORECASE)
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

# Unit letters are case-sensitive: ``10m`` must not silently mean ten megabytes.
_SIZE = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)", re.ASCII)
_SIZE_UNITS = {
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def parse_duration(text: str) -> int:
    """Seconds of a duration literal such as ``30m`` or ``7d``; ``0s`` parses to 0."""
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"invalid duration {text!r}: expected digits followed by one unit of s, m, h, d, w"
        )
    number = int(match.group(1))
    seconds = number * _DURATION_UNITS[match.group(2).lower()]
    if number > _U64_MAX or seconds > _U64_MAX:
        raise ValueError(f"invalid duration {text!r}: value too large")
    return seconds


def parse_size(text: str) -> int:
    """Bytes of a size literal such as ``512Mi`` or ``2G``; the number must be positive."""
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"invalid size {text!r}: expected digits followed by one unit of "
            "K, M, G, T, Ki, Mi, Gi, Ti"
        )
    number = int(match.group(1))
    if number == 0:
        raise ValueError(f"invalid size {text!r}: must be greater than zero")
    size = number * _SIZE_UNITS[match.group(2)]
    if size > _I64_MAX:
        raise ValueError(f"invalid size {text!r}: value too large")
    return size

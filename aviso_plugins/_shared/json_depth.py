"""How deeply a JSON text nests, measured without parsing it.

Python's ``json`` module recurses once per array/object level, so a deep enough document
raises ``RecursionError`` (or worse) inside the parser. Texts that come from clients (request
bodies, an admin body, a JWT payload) are measured here first and refused above
``limits.max_json_depth``.
"""

from __future__ import annotations

import re
from itertools import accumulate

# The closing quote is optional so that an unterminated string runs to the end in one match:
# rescanning it from every later quote would be quadratic.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
# Brackets become +1 / -1 (as signed bytes), everything else is deleted.
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def exceeds_json_depth(data: bytes | str, limit: int) -> bool:
    """True when arrays/objects nest more than ``limit`` levels (strings are skipped).

    A text with no more brackets than ``limit`` cannot nest deeper: counting them is one C
    pass, which is all an ordinary body costs. Only bracket-rich texts are scanned: strings
    removed, then a running sum over the brackets. Malformed text is measured as well as it
    can be; the parser refuses it afterwards.
    """
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    if data.count(b"[") + data.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", data).translate(_BRACKETS, _NOT_BRACKETS)
    return bool(brackets) and max(accumulate(memoryview(brackets).cast("b"))) > limit

"""How deeply a JSON text nests, measured without parsing it.

Python's ``json`` module recurses once per array/object level, so a deep enough document
raises ``RecursionError`` (or worse) inside the parser. Texts that come from clients (an
admin body, a JWT payload) are measured here first and refused above ``limits.max_json_depth``.
"""

from __future__ import annotations

import re

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def exceeds_json_depth(text: str, limit: int) -> bool:
    """True when arrays/objects nest more than ``limit`` levels (strings are skipped).

    Malformed text is measured as well as it can be; the parser refuses it afterwards.
    """
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False

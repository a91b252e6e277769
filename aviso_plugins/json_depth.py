"""How deeply a JSON text nests, measured without parsing it.

Python's ``json`` module recurses once per array/object level, so a deep enough document
raises ``RecursionError`` (or worse) inside the parser. Texts that come from clients (an
admin body, a JWT payload) are measured here first and refused above ``limits.max_json_depth``.
"""

from __future__ import annotations

import re
from itertools import accumulate

# The closing quote is optional so that an unterminated string runs to the end in one match:
# rescanning it from every later quote would be quadratic.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def exceeds_json_depth(text: str, limit: int) -> bool:
    """True when arrays/objects nest more than ``limit`` levels (strings are skipped).

    Malformed text is measured as well as it can be; the parser refuses it afterwards. Every
    step is a regular expression or a C-level iteration: a body of a few hundred kilobytes
    is measured in milliseconds.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return bool(brackets) and max(accumulate(map(_STEP.__getitem__, brackets))) > limit

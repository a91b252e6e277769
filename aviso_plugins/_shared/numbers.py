"""Number grammars and number-to-text rules shared by the host and field handlers.

Python's ``int()`` and ``float()`` accept surrounding whitespace, ``_`` separators and
non-ASCII digits, none of which the wire contract allows, so every parser here checks an
ASCII-only grammar first and only then converts. Error reasons follow the wording of the
reference implementation's parsers because they reach clients as ``details``.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

_INT = re.compile(r"([+-]?)([0-9]+)")
_DEC = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# re.ASCII keeps IGNORECASE from folding look-alikes such as the dotless "ı" into "i".
_NON_FINITE_WORD = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE | re.ASCII)
_INT64_DIGITS = len(str(INT64_MAX))

# The float text rule of the wire contract switches to scientific notation outside this
# window of decimal exponents (see json_scalar_text).
_MAX_POSITIONAL_EXPONENT = 16
_MIN_POSITIONAL_EXPONENT = -5


def parse_int_text(text: str) -> int:
    """Parse INT text (``^[+-]?[0-9]+$``) into a signed 64-bit integer.

    Raises ``ValueError`` whose message is the reason, e.g. ``invalid digit found in string``.
    """
    match = _INT.fullmatch(text)
    if match is None:
        raise ValueError(
            "cannot parse integer from empty string"
            if text == ""
            else "invalid digit found in string"
        )
    sign, digits = match.groups()
    negative = sign == "-"
    significant = digits.lstrip("0") or "0"
    # Bounding the digit count first keeps int() away from huge input (slow, and beyond
    # Python's integer-string limit).
    value = int(significant) if len(significant) <= _INT64_DIGITS else None
    if value is None or value > INT64_MAX + negative:
        raise ValueError(
            "number too small to fit in target type"
            if negative
            else "number too large to fit in target type"
        )
    return -value if negative else value


def parse_decimal_text(text: str) -> float:
    """Parse DEC text, including the words ``inf``, ``infinity`` and ``nan`` (any case, signed).

    The result may be infinite or NaN (callers that need a finite value use
    :func:`parse_finite_decimal`); underflow yields zero. Raises ``ValueError`` with the reason.
    """
    if _DEC.fullmatch(text) is None and _NON_FINITE_WORD.fullmatch(text) is None:
        raise ValueError(
            "cannot parse float from empty string" if text == "" else "invalid float literal"
        )
    return float(text)


def parse_finite_decimal(text: str) -> float:
    """Parse DEC text and reject NaN, infinities and values that overflow (``1e400``)."""
    value = parse_decimal_text(text)
    if not math.isfinite(value):
        raise ValueError("number is not finite")
    return value


def float_display(value: float) -> str:
    """FLOAT DISPLAY: shortest round-trip digits in plain positional notation.

    Never an exponent, no trailing fractional zeros or ``.``; negative zero is ``-0``
    (``42.5``, ``1000``, ``0.0000001``). Raises ``ValueError`` for non-finite values.
    """
    if not math.isfinite(value):
        raise ValueError(f"cannot display non-finite number {value!r}")
    digits, exponent = _shortest_digits(value)
    return _sign(value) + _positional(digits, exponent)


def json_scalar_text(value: str | int | float | bool) -> str:
    """The text a JSON scalar identifier value stands for.

    Strings are unchanged, booleans are ``true``/``false``, integers in
    [-2^63, 2^64-1] are plain decimal, and every other number follows the float text rule
    (``3.0``, ``42.5``, ``0.00001``, ``1e16``, ``1.5e17``, ``1e-6``). An integer too large
    for a double raises ``OverflowError`` (the host rejects such documents when parsing);
    a non-finite float raises ``ValueError``.
    """
    # bool is a subclass of int, so it must be tested first.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if INT64_MIN <= value <= UINT64_MAX:
            return str(value)
        value = float(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"not a JSON scalar: {type(value).__name__}")


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON text")
    digits, exponent = _shortest_digits(value)
    count = len(digits)
    if count <= exponent <= _MAX_POSITIONAL_EXPONENT:
        body = _positional(digits, exponent) + ".0"
    elif _MIN_POSITIONAL_EXPONENT < exponent <= _MAX_POSITIONAL_EXPONENT:
        body = _positional(digits, exponent)
    else:
        mantissa = digits if count == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{mantissa}e{exponent - 1}"
    return _sign(value) + body


def _shortest_digits(value: float) -> tuple[str, int]:
    """Digits ``d1…dn`` and exponent ``e`` with ``|value| = 0.d1…dn × 10^e``; zero is ``("0", 1)``.

    ``repr`` already yields the shortest digit string that round-trips; ``normalize``
    strips the trailing zeros of forms such as ``100.0``.
    """
    number = Decimal(repr(abs(value))).normalize()
    digits = "".join(map(str, number.as_tuple().digits))
    return digits, number.adjusted() + 1


def _positional(digits: str, exponent: int) -> str:
    if exponent >= len(digits):
        return digits + "0" * (exponent - len(digits))
    if exponent > 0:
        return f"{digits[:exponent]}.{digits[exponent:]}"
    return "0." + "0" * -exponent + digits


def _sign(value: float) -> str:
    # copysign, unlike "< 0", sees the sign of negative zero.
    return "-" if math.copysign(1.0, value) < 0 else ""

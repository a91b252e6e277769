import math

import pytest

from aviso_plugins._shared.numbers import (
    INT64_MAX,
    INT64_MIN,
    float_display,
    json_scalar_text,
    parse_decimal_text,
    parse_finite_decimal,
    parse_int_text,
)

# -- INT -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", 7),
        ("007", 7),
        ("+4", 4),
        ("+42", 42),
        ("-0", 0),
        ("-007", -7),
        ("9223372036854775807", INT64_MAX),
        ("-9223372036854775808", INT64_MIN),
        ("000000000000000000000000009223372036854775807", INT64_MAX),
    ],
)
def test_int_accepts(text: str, expected: int) -> None:
    assert parse_int_text(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "cannot parse integer from empty string"),
        ("4.0", "invalid digit found in string"),
        ("1e1", "invalid digit found in string"),
        (" 4", "invalid digit found in string"),
        ("4 ", "invalid digit found in string"),
        ("4\n", "invalid digit found in string"),
        ("4_0", "invalid digit found in string"),
        ("+", "invalid digit found in string"),
        ("-", "invalid digit found in string"),
        ("+-1", "invalid digit found in string"),
        ("0x10", "invalid digit found in string"),
        ("\u0664\u0662", "invalid digit found in string"),  # Arabic-Indic digits
        ("\uff14", "invalid digit found in string"),  # full-width 4
        ("abc", "invalid digit found in string"),
        ("9223372036854775808", "number too large to fit in target type"),
        ("-9223372036854775809", "number too small to fit in target type"),
        ("1" * 5000, "number too large to fit in target type"),
    ],
)
def test_int_rejects_with_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"^{reason}$"):
        parse_int_text(text)


# -- DEC -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7", 7.0),
        ("+3.5", 3.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("007.5", 7.5),
        ("1E5", 1e5),
        ("1.e5", 1e5),
        ("12.34e-2", 0.1234),
        ("-0.0", -0.0),
        ("1e-400", 0.0),
    ],
)
def test_decimal_accepts(text: str, expected: float) -> None:
    value = parse_decimal_text(text)
    assert value == expected
    assert math.copysign(1, value) == math.copysign(1, expected)


@pytest.mark.parametrize(
    "text", [" 1.5", "1.5 ", "1_0", "0x10", "1e", "e5", ".", "+", "", "1.5.2", "١", "1e+"]
)
def test_decimal_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_decimal_text(text)


@pytest.mark.parametrize("text", ["inf", "-Infinity", "+INF", "nan", "NaN", "-nan", "1e400"])
def test_decimal_parses_non_finite_words_which_finite_parser_rejects(text: str) -> None:
    assert not math.isfinite(parse_decimal_text(text))
    with pytest.raises(ValueError, match="not finite"):
        parse_finite_decimal(text)


@pytest.mark.parametrize("text", ["infinit", "infinityy", "ınf", "nAn1", "in f"])
def test_decimal_rejects_near_miss_words(text: str) -> None:
    with pytest.raises(ValueError, match="invalid float literal"):
        parse_decimal_text(text)


def test_underflow_is_zero_and_finite() -> None:
    assert parse_finite_decimal("1e-400") == 0.0


# -- FLOAT DISPLAY -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (42.50, "42.5"),
        (1e3, "1000"),
        (1.0, "1"),
        (3.0, "3"),
        (0.5, "0.5"),
        (10.0, "10"),
        (1e-7, "0.0000001"),
        (1e21, "1000000000000000000000"),
        (-1.5e-10, "-0.00000000015"),
        (0.30000000000000004, "0.30000000000000004"),
        (0.0, "0"),
        (-0.0, "-0"),
        (123.456, "123.456"),
        (-42.0, "-42"),
    ],
)
def test_float_display(value: float, expected: str) -> None:
    assert float_display(value) == expected


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_float_display_rejects_non_finite(value: float) -> None:
    with pytest.raises(ValueError):
        float_display(value)


@pytest.mark.parametrize("value", [5e-324, 1.7976931348623157e308, 0.1, 2.0**-1074 * 3, 1 / 3])
def test_float_display_round_trips(value: float) -> None:
    text = float_display(value)
    assert "e" not in text
    assert float(text) == value


# -- JSON scalar -> text -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ""),
        (" Rhine ", " Rhine "),
        ("1e16", "1e16"),
        (True, "true"),
        (False, "false"),
        (7, "7"),
        (-3, "-3"),
        (0, "0"),
        (18446744073709551615, "18446744073709551615"),
        (-9223372036854775808, "-9223372036854775808"),
        (18446744073709551616, "1.8446744073709552e19"),
        (-9223372036854775809, "-9.223372036854776e18"),
        (3.0, "3.0"),
        (1e2, "100.0"),
        (123456.0, "123456.0"),
        (42.5, "42.5"),
        (0.00001, "0.00001"),
        (0.0001234, "0.0001234"),
        (1e15, "1000000000000000.0"),
        (1234567890123456.7, "1234567890123456.8"),
        (1e16, "1e16"),
        (1.5e17, "1.5e17"),
        (0.000001, "1e-6"),
        (-2.5e-7, "-2.5e-7"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e308"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (4.0, "4.0"),
        (2.5, "2.5"),
    ],
)
def test_json_scalar_text(value: str | int | float | bool, expected: str) -> None:
    assert json_scalar_text(value) == expected


def test_json_scalar_text_rejects_non_scalars() -> None:
    with pytest.raises(TypeError):
        json_scalar_text(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        json_scalar_text([1])  # type: ignore[arg-type]


def test_json_scalar_text_rejects_non_finite() -> None:
    with pytest.raises(ValueError):
        json_scalar_text(math.nan)

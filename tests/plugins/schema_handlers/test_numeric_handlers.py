from typing import Any

import jsonschema
import pytest

from aviso_builtins.schema_handlers import numeric
from aviso_builtins.schema_handlers.numeric import FloatHandler, IntHandler
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.types import InvalidValue

ALL_OPERATORS = {"eq", "in", "gt", "gte", "lt", "lte", "between"}


def int_handler(field: str = "level_band", **definition: Any) -> IntHandler:
    return IntHandler(field, {"required": False, **definition})


def float_handler(field: str = "stage_m", **definition: Any) -> FloatHandler:
    return FloatHandler(field, {"required": False, **definition})


def test_hook_lists_the_numeric_handlers() -> None:
    assert numeric.aviso_field_handlers() == [IntHandler, FloatHandler]


@pytest.mark.parametrize("cls", [IntHandler, FloatHandler])
def test_numeric_operators(cls: type[IntHandler | FloatHandler]) -> None:
    assert cls.operators == ALL_OPERATORS


# -- IntHandler ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("007", "7"),
        ("+4", "4"),
        ("+42", "42"),
        ("-0", "0"),
        ("-007", "-7"),
        ("9223372036854775807", "9223372036854775807"),
        ("-9223372036854775808", "-9223372036854775808"),
    ],
)
def test_int_canonical(value: str, canonical: str) -> None:
    assert int_handler().canonicalise(value) == canonical


@pytest.mark.parametrize(
    ("value", "details"),
    [
        ("4.0", "invalid digit found in string"),
        ("1e1", "invalid digit found in string"),
        (" 4", "invalid digit found in string"),
        ("4_0", "invalid digit found in string"),
        ("abc", "invalid digit found in string"),
        ("", "cannot parse integer from empty string"),
        ("*", "invalid digit found in string"),
        ("9223372036854775808", "number too large to fit in target type"),
    ],
)
def test_int_rejects_syntax(value: str, details: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        int_handler("level").canonicalise(value)
    assert caught.value.message == f"Field 'level' must be a valid integer, got: '{value}'"
    assert caught.value.details == details


def test_int_json_values() -> None:
    handler = int_handler()
    assert handler.canonicalise(json_scalar_text(4)) == "4"
    with pytest.raises(InvalidValue):
        handler.canonicalise(json_scalar_text(4.0))


@pytest.mark.parametrize(
    ("value", "accepted"), [("9", True), ("0", True), ("10", False), ("-1", False)]
)
def test_int_range(value: str, accepted: bool) -> None:
    handler = int_handler(range=[0, 9])
    if accepted:
        assert handler.canonicalise(value) == value
    else:
        with pytest.raises(InvalidValue) as caught:
            handler.canonicalise(value)
        assert (
            caught.value.message == f"Field 'level_band' must be within range [0, 9], got: {value}"
        )


def test_int_declared_outside_topic_still_range_checked() -> None:
    quality = int_handler("quality", range=[0, 3])
    assert quality.canonicalise("2") == "2"
    with pytest.raises(InvalidValue):
        quality.canonicalise("7")


def test_int_rejects_inverted_range_at_startup() -> None:
    with pytest.raises(ValueError, match="minimum 9 exceeds maximum 0"):
        int_handler(range=[9, 0])


def test_int_range_option_schema() -> None:
    schema = IntHandler.options["range"]
    jsonschema.validate([0, 9], schema)
    for bad in ([0], [0, 1, 2], [0, "9"], [0, 1.5], [True, 2], None):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


@pytest.mark.parametrize(
    ("operator", "operand", "matches"),
    [
        ("gte", 2, ["2", "3", "4", "9"]),
        ("between", [3, 3], ["3"]),
        ("in", [1, 4], ["1", "4"]),
        ("lte", 9, ["0", "1", "2", "3", "4", "9"]),
    ],
)
def test_int_constraints(operator: str, operand: Any, matches: list[str]) -> None:
    predicate = int_handler(range=[0, 9]).compile_constraint(operator, operand)
    assert [v for v in ("0", "1", "2", "3", "4", "9") if predicate(v)] == matches


@pytest.mark.parametrize(
    ("operator", "operand"),
    [
        ("gte", "2"),
        ("gte", 2.0),
        ("gte", True),
        ("between", [5, 2]),
        ("between", [2]),
        ("between", [1, 2, 3]),
        ("in", []),
        ("in", 4),
        ("lt", 12),
    ],
)
def test_int_constraint_errors(operator: str, operand: Any) -> None:
    with pytest.raises(InvalidValue, match=r"^Field 'level_band' "):
        int_handler(range=[0, 9]).compile_constraint(operator, operand)


def test_int_describe() -> None:
    assert int_handler().describe() == {
        "type": "IntHandler",
        "required": False,
        "range": None,
        "value_kind": "integer",
        "operators": ["between", "eq", "gt", "gte", "in", "lt", "lte"],
    }
    assert int_handler(range=[0, 9]).describe()["range"] == [0, 9]


# -- FloatHandler --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("3.50", "3.5"),
        ("42.50", "42.5"),
        ("1e1", "10"),
        ("3.0", "3"),
        (".5", "0.5"),
        ("5.", "5"),
        ("-0.0", "-0"),
        ("1e-7", "0.0000001"),
        ("+1E3", "1000"),
        ("007.5", "7.5"),
        ("1e-400", "0"),
        ("0.30000000000000004", "0.30000000000000004"),
    ],
)
def test_float_canonical(value: str, canonical: str) -> None:
    assert float_handler().canonicalise(value) == canonical


@pytest.mark.parametrize(
    ("value", "details"),
    [
        ("NaN", "number is not finite"),
        ("inf", "number is not finite"),
        ("-Infinity", "number is not finite"),
        ("1e400", "number is not finite"),
        ("1_0", "invalid float literal"),
        (" 1.5", "invalid float literal"),
        ("0x10", "invalid float literal"),
        ("", "cannot parse float from empty string"),
        ("*", "invalid float literal"),
    ],
)
def test_float_rejects(value: str, details: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        float_handler().canonicalise(value)
    assert caught.value.message == f"Field 'stage_m' must be a valid finite number, got: '{value}'"
    assert caught.value.details == details


@pytest.mark.parametrize(
    ("value", "accepted"), [("40", True), ("-5", True), ("41", False), ("-5.01", False)]
)
def test_float_range(value: str, accepted: bool) -> None:
    handler = float_handler(range=[-5.0, 40.0])
    if accepted:
        handler.canonicalise(value)
    else:
        with pytest.raises(InvalidValue) as caught:
            handler.canonicalise(value)
        assert caught.value.message == (
            f"Field 'stage_m' must be within range [-5.0, 40.0], got: {value}"
        )


def test_float_range_accepts_integers() -> None:
    handler = float_handler(range=[-5, 40])
    assert handler.canonicalise("40.0") == "40"
    with pytest.raises(InvalidValue):
        handler.canonicalise("40.5")


@pytest.mark.parametrize(
    ("configured", "reason"),
    [
        ([40.0, -5.0], "exceeds"),
        ([0, float("inf")], "finite"),
        ([float("nan"), 1], "finite"),
        ([0, 10**400], "finite"),
    ],
)
def test_float_rejects_bad_range_at_startup(configured: list[Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        float_handler(range=configured)


@pytest.mark.parametrize(
    ("operator", "operand", "matches"),
    [
        ("between", [2.5, 3.5], ["2.5", "3", "3.5"]),
        ("eq", 0.3, ["0.3"]),
        ("gt", 5, ["5.5"]),
        ("in", [3, 0.3], ["0.3", "3"]),
    ],
)
def test_float_constraints(operator: str, operand: Any, matches: list[str]) -> None:
    predicate = float_handler(range=[-5.0, 40.0]).compile_constraint(operator, operand)
    stored = ("0.3", "0.30000000000000004", "2.5", "3", "3.5", "3.6", "5.5")
    assert [v for v in stored if predicate(v)] == matches


@pytest.mark.parametrize(
    ("operator", "operand"), [("eq", "1"), ("eq", True), ("lt", 41), ("between", [1, 0.5])]
)
def test_float_constraint_errors(operator: str, operand: Any) -> None:
    with pytest.raises(InvalidValue, match=r"^Field 'stage_m' "):
        float_handler(range=[-5.0, 40.0]).compile_constraint(operator, operand)


def test_float_describe() -> None:
    assert float_handler(range=[-5.0, 40]).describe() == {
        "type": "FloatHandler",
        "required": False,
        "range": [-5.0, 40],
        "value_kind": "float",
        "operators": ["between", "eq", "gt", "gte", "in", "lt", "lte"],
    }

from typing import Any

import pytest

from aviso_plugins._shared.constraints import (
    compile_constraint,
    enum_domain,
    float_domain,
    integer_domain,
)
from aviso_plugins.types import InvalidValue

LEVEL = integer_domain((0, 9))
STAGE = float_domain((-5.0, 40.0))
BASIN = enum_domain(["Danube", "Rhine", "Elbe"])


def matching(domain: Any, operator: str, operand: Any, stored: list[str]) -> list[str]:
    predicate = compile_constraint("f", operator, operand, domain)
    return [value for value in stored if predicate(value)]


@pytest.mark.parametrize(
    ("operator", "operand", "expected"),
    [
        ("eq", 3, ["3"]),
        ("in", [1, 4], ["1", "4"]),
        ("gt", 7, ["8", "9"]),
        ("gte", 7, ["7", "8", "9"]),
        ("lt", 2, ["0", "1"]),
        ("lte", 2, ["0", "1", "2"]),
        ("lte", 9, [str(n) for n in range(10)]),
        ("between", [3, 3], ["3"]),
        ("between", [2, 4], ["2", "3", "4"]),
        ("between", [2, 9], [str(n) for n in range(2, 10)]),
    ],
)
def test_integer_operators(operator: str, operand: Any, expected: list[str]) -> None:
    assert matching(LEVEL, operator, operand, [str(n) for n in range(10)]) == expected


@pytest.mark.parametrize(
    ("operator", "operand", "reason"),
    [
        ("gte", "2", 'must be an integer, got: "2"'),
        ("gte", 2.0, "must be an integer, got: 2.0"),
        ("gte", 1e2, "must be an integer"),
        ("gte", True, "must be an integer, got: true"),
        ("gte", None, "must be an integer, got: null"),
        ("gte", [2], "expects a single value"),
        ("eq", {"a": 1}, "expects a single value"),
        ("between", [5, 2], "requires min <= max"),
        ("between", [2], r"expects an array \[min, max\]"),
        ("between", [1, 2, 3], r"expects an array \[min, max\]"),
        ("between", 2, r"expects an array \[min, max\]"),
        ("in", [], "expects a non-empty array"),
        ("in", 4, "expects a non-empty array"),
        ("in", [1, "4"], "must be an integer"),
        ("lt", 12, r"outside the field's range \[0, 9\]"),
        ("gt", -1, "outside the field's range"),
        ("in", [1, 10], "outside the field's range"),
        ("between", [2, 10], "outside the field's range"),
        ("ne", 2, "unsupported operator"),
    ],
)
def test_integer_operand_errors(operator: str, operand: Any, reason: str) -> None:
    with pytest.raises(InvalidValue, match=reason) as caught:
        compile_constraint("level_band", operator, operand, LEVEL)
    assert caught.value.message.startswith(f"Field 'level_band' constraint '{operator}': ")


def test_integer_operands_limited_to_64_bits_without_range() -> None:
    compile_constraint("f", "eq", 2**63 - 1, integer_domain())
    with pytest.raises(InvalidValue, match="64-bit"):
        compile_constraint("f", "eq", 2**63, integer_domain())


def test_integer_predicate_skips_unreadable_stored_values() -> None:
    assert matching(integer_domain(), "gte", 0, ["x", "4.0", "", "*", "007", "-1"]) == ["007"]


def test_float_between_is_inclusive() -> None:
    stored = ["2.4", "2.5", "3", "3.5", "3.6"]
    assert matching(STAGE, "between", [2.5, 3.5], stored) == ["2.5", "3", "3.5"]


def test_float_equality_is_exact() -> None:
    stored = ["0.3", "0.30000000000000004"]
    assert matching(STAGE, "eq", 0.3, stored) == ["0.3"]
    assert matching(STAGE, "in", [0.1, 0.3], stored) == ["0.3"]


def test_float_accepts_integer_operands() -> None:
    assert matching(STAGE, "gt", 5, ["5", "5.5", "40"]) == ["5.5", "40"]


def test_float_zero_equals_negative_zero() -> None:
    assert matching(STAGE, "eq", 0, ["-0", "0"]) == ["-0", "0"]


def test_float_predicate_skips_non_finite_stored_values() -> None:
    assert matching(float_domain(), "lt", 1.0, ["-inf", "nan", "0.5", "x"]) == ["0.5"]


@pytest.mark.parametrize(
    ("operator", "operand", "reason"),
    [
        ("eq", "1", 'must be a number, got: "1"'),
        ("eq", False, "must be a number, got: false"),
        ("eq", float("inf"), "must be finite"),
        ("eq", float("nan"), "must be finite"),
        ("eq", 10**400, "must be finite"),
        ("lt", 41, r"outside the field's range \[-5.0, 40.0\]"),
        ("between", [1.5, 1.25], "requires min <= max"),
    ],
)
def test_float_operand_errors(operator: str, operand: Any, reason: str) -> None:
    with pytest.raises(InvalidValue, match=reason):
        compile_constraint("stage_m", operator, operand, STAGE)


def test_enum_in_matches_case_insensitively() -> None:
    stored = ["danube", "rhine", "elbe"]
    assert matching(BASIN, "in", ["RHINE", "elbe"], stored) == ["rhine", "elbe"]
    assert matching(BASIN, "eq", "Danube", stored) == ["danube"]


@pytest.mark.parametrize(
    ("operator", "operand", "reason"),
    [
        ("in", ["po"], r'"po" is not one of \["Danube", "Rhine", "Elbe"\]'),
        ("eq", 1, "must be a string, got: 1"),
        ("gt", ["a"], "expects a single value"),
    ],
)
def test_enum_operand_errors(operator: str, operand: Any, reason: str) -> None:
    with pytest.raises(InvalidValue, match=reason):
        compile_constraint("basin", operator, operand, BASIN)


def test_enum_number_operand_rejected_even_when_its_text_is_allowed() -> None:
    with pytest.raises(InvalidValue):
        compile_constraint("f", "eq", 1, enum_domain(["1", "2"]))

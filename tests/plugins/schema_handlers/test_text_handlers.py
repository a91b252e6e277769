from typing import Any

import pytest

from aviso_builtins.schema_handlers import text
from aviso_builtins.schema_handlers.text import EnumHandler, ExpverHandler, StringHandler
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.types import FieldHandler, InvalidValue


def make(cls: type[FieldHandler], field: str = "f", **definition: Any) -> Any:
    return cls(field, {"required": False, **definition})


def test_hook_lists_the_text_handlers() -> None:
    assert text.aviso_field_handlers() == [StringHandler, EnumHandler, ExpverHandler]


# -- StringHandler -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("definition", "value"),
    [
        ({"max_length": 8}, "ABCDEFGH"),
        ({}, " "),
        ({}, "*"),
        ({}, "KÖLN.1"),
        ({}, "a>b%c"),
        ({"max_length": 2}, "é"),
    ],
)
def test_string_accepts_unchanged(definition: dict[str, Any], value: str) -> None:
    assert make(StringHandler, **definition).canonicalise(value) == value


@pytest.mark.parametrize(
    ("max_length", "value", "message"),
    [
        (8, "ABCDEFGHI", "Field 'station' must be at most 8 bytes long (UTF-8), got 9 bytes"),
        (2, "éa", "Field 'station' must be at most 2 bytes long (UTF-8), got 3 bytes"),
        (None, "", "Field 'station' cannot be empty"),
        (0, "a", "Field 'station' must be at most 0 bytes long (UTF-8), got 1 bytes"),
    ],
)
def test_string_rejects(max_length: int | None, value: str, message: str) -> None:
    definition = {} if max_length is None else {"max_length": max_length}
    handler = make(StringHandler, "station", **definition)
    with pytest.raises(InvalidValue) as caught:
        handler.canonicalise(value)
    assert caught.value.message == message


def test_string_counts_lone_surrogates_instead_of_failing() -> None:
    with pytest.raises(InvalidValue):
        make(StringHandler, max_length=2).canonicalise("\ud800")


@pytest.mark.parametrize(
    ("json_value", "canonical"), [(True, "true"), (1e16, "1e16"), (3.0, "3.0"), (7, "7")]
)
def test_string_receives_json_scalars_as_text(json_value: Any, canonical: str) -> None:
    assert make(StringHandler).canonicalise(json_scalar_text(json_value)) == canonical


def test_string_supports_no_constraints() -> None:
    handler = make(StringHandler, "station")
    assert not handler.operators
    with pytest.raises(InvalidValue, match="does not support constraint filters"):
        handler.compile_constraint("eq", "x")


def test_string_describe() -> None:
    assert make(StringHandler).describe() == {
        "type": "StringHandler",
        "required": False,
        "max_length": None,
        "value_kind": "text",
        "operators": [],
    }
    assert make(StringHandler, max_length=8, description="d").describe() == {
        "type": "StringHandler",
        "required": False,
        "max_length": 8,
        "description": "d",
        "value_kind": "text",
        "operators": [],
    }


# -- EnumHandler ---------------------------------------------------------------------------

RIVERS = ["Danube", "Rhine", "Elbe"]


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("RHINE", "rhine"), ("Rhine", "rhine"), ("danube", "danube"), ("DANUBE", "danube")],
)
def test_enum_canonical_is_lower_case_input(value: str, canonical: str) -> None:
    assert make(EnumHandler, values=RIVERS).canonicalise(value) == canonical


@pytest.mark.parametrize("value", ["Po", "", " rhine", "rhine ", "*"])
def test_enum_rejects_other_values(value: str) -> None:
    handler = make(EnumHandler, "basin", values=RIVERS)
    with pytest.raises(InvalidValue) as caught:
        handler.canonicalise(value)
    assert caught.value.message == (
        f'Field \'basin\' must be one of ["Danube", "Rhine", "Elbe"], got: \'{value}\''
    )


def test_enum_uses_unicode_lower_case() -> None:
    assert make(EnumHandler, values=["KÖLN"]).canonicalise("köln") == "köln"


def test_enum_json_number_works_when_its_text_is_listed() -> None:
    assert make(EnumHandler, values=["1", "2"]).canonicalise(json_scalar_text(1)) == "1"


def test_enum_star_is_accepted_only_when_listed() -> None:
    assert make(EnumHandler, values=["*", "a"]).canonicalise("*") == "*"


def test_enum_rejects_empty_values_at_startup() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        make(EnumHandler, values=[])


def test_enum_operators_and_required_option() -> None:
    assert EnumHandler.operators == {"eq", "in"}
    assert EnumHandler.required_options == {"values"}


def test_enum_in_constraint() -> None:
    handler = make(EnumHandler, "basin", values=RIVERS)
    predicate = handler.compile_constraint("in", ["RHINE", "elbe"])
    assert [value for value in ("danube", "rhine", "elbe") if predicate(value)] == [
        "rhine",
        "elbe",
    ]


@pytest.mark.parametrize(("operator", "operand"), [("in", ["po"]), ("eq", 1), ("in", [])])
def test_enum_constraint_errors(operator: str, operand: Any) -> None:
    handler = make(EnumHandler, "basin", values=RIVERS)
    with pytest.raises(InvalidValue, match=r"^Field 'basin' "):
        handler.compile_constraint(operator, operand)


def test_enum_describe() -> None:
    assert make(EnumHandler, values=RIVERS).describe() == {
        "type": "EnumHandler",
        "required": False,
        "values": RIVERS,
        "value_kind": "enum",
        "operators": ["eq", "in"],
    }


# -- ExpverHandler -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("1", "0001"),
        ("+7", "0007"),
        ("00042", "0042"),
        ("0", "0000"),
        ("0001", "0001"),
        ("12345", "12345"),
        ("4294967295", "4294967295"),
        ("0004294967295", "4294967295"),
        ("4294967296", "4294967296"),
        ("99999999999999999999999", "99999999999999999999999"),
        ("PROD", "prod"),
        ("Dev-V2.1", "dev-v2.1"),
        ("-1", "-1"),
        (" 1", " 1"),
        ("1 ", "1 "),
        ("*", "*"),
        ("++1", "++1"),
        ("\uff11", "\uff11"),  # full-width 1 is not numeric
    ],
)
def test_expver_canonical(value: str, canonical: str) -> None:
    assert make(ExpverHandler).canonicalise(value) == canonical


def test_expver_json_number() -> None:
    assert make(ExpverHandler).canonicalise(json_scalar_text(1)) == "0001"


@pytest.mark.parametrize(("default", "canonical"), [("1", "0001"), ("PROD", "prod")])
def test_expver_empty_uses_canonical_default(default: str, canonical: str) -> None:
    assert make(ExpverHandler, default=default).canonicalise("") == canonical


def test_expver_empty_without_default_is_rejected() -> None:
    with pytest.raises(InvalidValue) as caught:
        make(ExpverHandler, "run").canonicalise("")
    assert caught.value.message == "Field 'run' cannot be empty"


def test_expver_rejects_empty_default_at_startup() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        make(ExpverHandler, default="")


def test_expver_describe() -> None:
    assert make(ExpverHandler).describe() == {
        "type": "ExpverHandler",
        "required": False,
        "default": None,
        "value_kind": "text",
        "operators": [],
    }
    assert make(ExpverHandler, default="0001").describe()["default"] == "0001"

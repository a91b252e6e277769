from typing import Any

import pytest

from aviso_builtins.schema_handlers import temporal
from aviso_builtins.schema_handlers.temporal import DateHandler, TimeHandler
from aviso_plugins._shared.numbers import json_scalar_text
from aviso_plugins.types import InvalidValue


def date_handler(**definition: Any) -> DateHandler:
    return DateHandler("obs_date", {"required": False, **definition})


def time_handler() -> TimeHandler:
    return TimeHandler("obs_time", {"required": False})


def test_hook_lists_the_temporal_handlers() -> None:
    assert temporal.aviso_field_handlers() == [DateHandler, TimeHandler]


# -- DateHandler ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("2025-07-06", "20250706"),
        ("20250706", "20250706"),
        ("2025-187", "20250706"),
        ("2025-7-6", "20250706"),
        (" 2025-07-06", "20250706"),
        ("2025- 07-06", "20250706"),
        ("2025-07- 06", "20250706"),
        ("2024-02-29", "20240229"),
        ("2024-366", "20241231"),
        ("2025-365", "20251231"),
        ("2025-12", "20250112"),
        ("2025-1", "20250101"),
        ("2025-100", "20250410"),
        ("2025-060", "20250301"),
        ("2024-060", "20240229"),
        ("2025125", "20251205"),
        ("2025071", "20250701"),
        ("25-12-25", "00251225"),
        ("2000-02-29", "20000229"),
        ("0-2-29", "00000229"),  # year 0 is a proleptic Gregorian leap year
    ],
)
def test_date_canonical_default_format(value: str, canonical: str) -> None:
    assert date_handler().canonicalise(value) == canonical


def test_date_explicit_compact_format() -> None:
    assert date_handler(canonical_format="%Y%m%d").canonicalise("2025-07-06") == "20250706"


@pytest.mark.parametrize(
    ("value", "canonical"),
    [("20250706", "2025-07-06"), ("2025-187", "2025-07-06"), ("25-1-2", "0025-01-02")],
)
def test_date_dashed_format(value: str, canonical: str) -> None:
    assert date_handler(canonical_format="%Y-%m-%d").canonicalise(value) == canonical


@pytest.mark.parametrize(
    "value",
    [
        "2023-02-29",
        "1900-02-29",
        "2025-13-01",
        "2025-00-10",
        "2025-04-31",
        "2025-366",
        "2025-000",
        "2025-1000",
        "202512",
        "12345678",
        "2025-07-06 ",
        "2025 -07-06",
        "2025-07 -06",
        "2025/07/06",
        "2025-07-06T00:00:00",
        "10000-01-01",
        "",
        " ",
        "+2025-07-06",
        "-2025-07-06",
        "２０２５-07-06",  # full-width digits
        "2025-07-06\n",
        "abc",
    ],
)
def test_date_rejects(value: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        date_handler().canonicalise(value)
    assert caught.value.message == (
        f"Field 'obs_date' must be a valid date (YYYY-MM-DD, YYYYMMDD or YYYY-DDD), got: '{value}'"
    )


@pytest.mark.parametrize("fmt", ["%d/%m/%Y", "%Y%m", "", "%Y-%m-%d "])
def test_date_rejects_unknown_format_at_startup(fmt: str) -> None:
    with pytest.raises(ValueError, match="canonical_format"):
        date_handler(canonical_format=fmt)


def test_date_supports_no_constraints() -> None:
    assert not DateHandler.operators
    with pytest.raises(InvalidValue, match="does not support constraint filters"):
        date_handler().compile_constraint("eq", "20250706")


@pytest.mark.parametrize(
    ("definition", "shown"), [({}, "%Y%m%d"), ({"canonical_format": "%Y-%m-%d"}, "%Y-%m-%d")]
)
def test_date_describe_shows_effective_format(definition: dict[str, str], shown: str) -> None:
    assert date_handler(**definition).describe() == {
        "type": "DateHandler",
        "required": False,
        "canonical_format": shown,
        "value_kind": "date",
        "operators": [],
    }


# -- TimeHandler ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("0", "0000"),
        ("9", "0900"),
        ("09", "0900"),
        ("23", "2300"),
        ("14:30", "1430"),
        ("9:05", "0905"),
        ("09:05", "0905"),
        ("0:00", "0000"),
        ("23:59", "2359"),
        ("0905", "0905"),
        ("2359", "2359"),
        ("0000", "0000"),
    ],
)
def test_time_canonical(value: str, canonical: str) -> None:
    assert time_handler().canonicalise(value) == canonical


@pytest.mark.parametrize(
    "value",
    [
        "24",
        "99",
        "24:00",
        "12:60",
        "12:5",
        "1:2",
        "12:30:00",
        " 12:30",
        "12:30 ",
        "2400",
        "1260",
        "930",
        "12345",
        " 12",
        "12 ",
        "12.30",
        "12-30",
        "1a",
        "",
        "１２:30",  # full-width digits
        "١٢",  # Arabic-Indic digits
        "+9",
    ],
)
def test_time_rejects(value: str) -> None:
    with pytest.raises(InvalidValue) as caught:
        time_handler().canonicalise(value)
    assert caught.value.message.startswith("Field 'obs_time' must be a valid time")


@pytest.mark.parametrize(("json_value", "canonical"), [(0, "0000"), (1200, "1200"), (9, "0900")])
def test_time_json_numbers(json_value: int, canonical: str) -> None:
    assert time_handler().canonicalise(json_scalar_text(json_value)) == canonical


@pytest.mark.parametrize("json_value", [930, 12.0])
def test_time_json_numbers_rejected(json_value: float) -> None:
    with pytest.raises(InvalidValue):
        time_handler().canonicalise(json_scalar_text(json_value))


def test_time_describe() -> None:
    assert time_handler().describe() == {
        "type": "TimeHandler",
        "required": False,
        "value_kind": "time",
        "operators": [],
    }

"""The field handlers, end to end over HTTP.

Accepted values are observed through a replay's ``data.identifier`` (the stored canonical
text); rejected ones must answer 400 ``INVALID_NOTIFICATION_REQUEST`` on notify.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance.schema_support import (
    GAUGE_CONFIG,
    NOTIFY,
    REPLAY,
    WATCH,
    Harness,
    gauge_identifier,
    serve,
    unique_station,
    unique_tag,
)
from tests.support.configs import ForBackend


@pytest.fixture(scope="module")
def gauge(for_backend: ForBackend) -> Iterator[Harness]:
    with serve(for_backend(GAUGE_CONFIG)) as harness:
        yield harness


def reject_gauge(gauge: Harness, field: str, value: Any) -> dict[str, Any]:
    """Notify ``river_gauge`` with one bad value: 400 naming the field, nothing stored."""
    identifier = gauge_identifier(**{field: value})
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert field in error["message"], error
    if field not in ("basin", "station"):
        query = {"basin": identifier["basin"], "station": identifier["station"]}
        assert gauge.replay("river_gauge", query) == []
    return error


def reject_tagged(gauge: Harness, event_type: str, field: str, value: Any) -> None:
    tag = unique_tag()
    gauge.rejected(NOTIFY, event_type, {"tag": tag, field: value})
    assert gauge.replay(event_type, {"tag": tag}) == []


# -- StringHandler -----------------------------------------------------------


def test_string_max_length_accepts_eight_chars(gauge: Harness) -> None:
    assert gauge.gauge_canonical("station", "ABCDEFGH") == "ABCDEFGH"


def test_string_max_length_rejects_nine_chars(gauge: Harness) -> None:
    reject_gauge(gauge, "station", "ABCDEFGHI")


def test_string_empty_rejected(gauge: Harness) -> None:
    reject_gauge(gauge, "station", "")


# In-memory only: station is a topic token, and JetStream may refuse a subject token holding
# whitespace at storage time.
@pytest.mark.backends("in_memory")
def test_string_whitespace_only_kept(gauge: Harness) -> None:
    assert gauge.gauge_canonical("station", " ") == " "


def test_string_max_length_counts_utf8_bytes_accepts(gauge: Harness) -> None:
    assert gauge.tagged_canonical("short_code", "code", "é") == "é"


def test_string_max_length_counts_utf8_bytes_rejects(gauge: Harness) -> None:
    reject_tagged(gauge, "short_code", "code", "éa")


@pytest.mark.parametrize(
    ("value", "expected"), [(True, "true"), (1e16, "1e16"), (3.0, "3.0")], ids=str
)
def test_string_receives_json_scalars(gauge: Harness, value: Any, expected: str) -> None:
    assert gauge.gauge_canonical("station", value) == expected


# -- null / array ---------------------------------------------------------------

GAUGE_FIELDS = [
    "basin",
    "station",
    "obs_date",
    "obs_time",
    "level_band",
    "stage_m",
    "quality",
    "run",
    "polygon",
]


@pytest.mark.parametrize("field", GAUGE_FIELDS)
@pytest.mark.parametrize("value", [None, ["x"]], ids=["null", "array"])
def test_null_or_array_rejected_on_notify(gauge: Harness, field: str, value: Any) -> None:
    reject_gauge(gauge, field, value)


@pytest.mark.parametrize("path", [WATCH, REPLAY])
@pytest.mark.parametrize("field", ["station", "obs_date", "level_band", "run"])
@pytest.mark.parametrize("value", [None, [1]], ids=["null", "array"])
def test_null_or_array_rejected_on_streams(
    gauge: Harness, path: str, field: str, value: Any
) -> None:
    identifier = {"basin": "rhine", "station": unique_station(), field: value}
    gauge.rejected(path, "river_gauge", identifier)


# -- DateHandler ------------------------------------------------------------


@pytest.mark.parametrize("value", ["2025-07-06", "20250706", "2025-187", "2025-7-6"])
def test_date_layouts(gauge: Harness, value: str) -> None:
    assert gauge.gauge_canonical("obs_date", value) == "20250706"


def test_date_dashed_canonical_format(gauge: Harness) -> None:
    assert gauge.tagged_canonical("dash_date", "day", "20250706") == "2025-07-06"


@pytest.mark.parametrize(
    ("value", "expected"), [("2024-02-29", "20240229"), ("2024-366", "20241231")]
)
def test_date_calendar_accepted(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.gauge_canonical("obs_date", value) == expected


@pytest.mark.parametrize("value", ["2023-02-29", "2025-366", "2025-000"])
def test_date_calendar_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "obs_date", value)


@pytest.mark.parametrize(("value", "expected"), [("2025-12", "20250112"), ("2025125", "20251205")])
def test_date_greedy_components(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.gauge_canonical("obs_date", value) == expected


def test_date_six_digits_rejected(gauge: Harness) -> None:
    reject_gauge(gauge, "obs_date", "202512")


def test_date_leading_space_skipped(gauge: Harness) -> None:
    assert gauge.gauge_canonical("obs_date", " 2025-07-06") == "20250706"


@pytest.mark.parametrize("value", ["2025-07-06 ", "2025-07-06T00:00:00", "2025/07/06"])
def test_date_leftovers_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "obs_date", value)


# -- TimeHandler -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("9", "0900"),
        ("09", "0900"),
        ("0", "0000"),
        ("14:30", "1430"),
        ("9:05", "0905"),
        ("0905", "0905"),
    ],
)
def test_time_accepted(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.gauge_canonical("obs_time", value) == expected


@pytest.mark.parametrize("value", ["24", "24:00", "12:60", "12:5", "930", "12345", " 12", "12.30"])
def test_time_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "obs_time", value)


@pytest.mark.parametrize(("value", "expected"), [(0, "0000"), (1200, "1200")])
def test_time_json_numbers_accepted(gauge: Harness, value: int, expected: str) -> None:
    assert gauge.gauge_canonical("obs_time", value) == expected


def test_time_json_number_930_rejected(gauge: Harness) -> None:
    reject_gauge(gauge, "obs_time", 930)


# -- EnumHandler ---------------------------------------------------------------


def test_enum_canonical_is_lower_case_input(gauge: Harness) -> None:
    assert gauge.gauge_canonical("basin", "RHINE") == "rhine"


def test_enum_unknown_value_rejected(gauge: Harness) -> None:
    identifier = gauge_identifier(basin="Po")
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert "basin" in error["message"], error


# -- IntHandler ------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("007", "7"), ("+4", "4"), ("-0", "0")])
def test_int_canonical_without_range(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.tagged_canonical("counter", "count", value) == expected


@pytest.mark.parametrize("value", ["4.0", "1e1", " 4", "4_0", 4.0], ids=repr)
def test_int_rejects_non_integer_text(gauge: Harness, value: Any) -> None:
    reject_tagged(gauge, "counter", "count", value)


def test_int_accepts_json_integer(gauge: Harness) -> None:
    assert gauge.tagged_canonical("counter", "count", 4) == "4"


def test_int_range_upper_bound_inclusive(gauge: Harness) -> None:
    assert gauge.gauge_canonical("level_band", "9") == "9"


@pytest.mark.parametrize("value", ["10", "-1"])
def test_int_range_rejects_outside(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "level_band", value)


def test_int_max_int64_accepted(gauge: Harness) -> None:
    value = "9223372036854775807"
    assert gauge.tagged_canonical("counter", "count", value) == value


def test_int_above_int64_rejected(gauge: Harness) -> None:
    reject_tagged(gauge, "counter", "count", "9223372036854775808")


# -- FloatHandler ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3.50", "3.5"),
        ("1e1", "10"),
        ("3.0", "3"),
        (".5", "0.5"),
        ("-0.0", "-0"),
        ("1e-7", "0.0000001"),
    ],
)
def test_float_display(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.gauge_canonical("stage_m", value) == expected


@pytest.mark.parametrize("value", ["NaN", "inf", "-Infinity", "1e400", "1_0", " 1.5", "0x10", "41"])
def test_float_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "stage_m", value)


# -- ExpverHandler ---------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", "0001"),
        ("+7", "0007"),
        ("00042", "0042"),
        ("12345", "12345"),
        ("PROD", "prod"),
        ("-1", "-1"),
    ],
)
def test_expver_canonical(gauge: Harness, value: str, expected: str) -> None:
    assert gauge.gauge_canonical("run", value) == expected


def test_expver_empty_uses_default(gauge: Harness) -> None:
    assert gauge.tagged_canonical("expver_default", "run", "") == "0001"


def test_expver_empty_without_default_rejected(gauge: Harness) -> None:
    reject_tagged(gauge, "expver_plain", "run", "")


def test_expver_key_absent_on_notify_rejected_despite_default(gauge: Harness) -> None:
    tag = unique_tag()
    error = gauge.rejected(NOTIFY, "expver_default", {"tag": tag})
    assert "run" in error["message"], error
    identifier = gauge_identifier()
    del identifier["run"]
    error = gauge.rejected(NOTIFY, "river_gauge", identifier)
    assert "run" in error["message"], error


# -- PolygonHandler --------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["(50,10,52,10,52,12,50,12,50,10)", "50,10,52,10,52,12,50,12,50,10"]
)
def test_polygon_delivered_as_array(gauge: Harness, value: str) -> None:
    # Upstream 0.11+ delivers spatial values as arrays; this test pinned the input text.
    expected = [[50.0, 10.0], [52.0, 10.0], [52.0, 12.0], [50.0, 12.0], [50.0, 10.0]]
    assert gauge.gauge_canonical("polygon", value) == expected


@pytest.mark.parametrize(
    "value",
    ["(50,10,52,10,50,10)", "(50,10,52,10,52,12,50,12)"],
    ids=["three-pairs", "not-closed"],
)
def test_polygon_shape_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "polygon", value)


@pytest.mark.parametrize(
    "value",
    [
        "(50,10,52,10,52,12,50,10",
        "(50,10),52,10,52,12,50,10)",
        "((50,10,52,10,52,12,50,10))",
        "()",
        "(50,10,52,10,52,12,50,10,50)",
        "(50,10,52,10,52,12,50,10,)",
    ],
    ids=["unbalanced", "inner-parens", "nested", "empty", "odd-count", "trailing-comma"],
)
def test_polygon_syntax_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "polygon", value)


def test_polygon_bounds_inclusive(gauge: Harness) -> None:
    value = "(90,-180,90,0,80,0,90,-180)"
    expected = [[90.0, -180.0], [90.0, 0.0], [80.0, 0.0], [90.0, -180.0]]
    assert gauge.gauge_canonical("polygon", value) == expected


@pytest.mark.parametrize(
    "value",
    ["(90.5,10,50,10,50,11,90.5,10)", "(50,180.5,52,10,52,12,50,180.5)"],
    ids=["latitude-90.5", "longitude-180.5"],
)
def test_polygon_out_of_bounds_rejected(gauge: Harness, value: str) -> None:
    reject_gauge(gauge, "polygon", value)

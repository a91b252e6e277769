"""Spark filters to replay filters (``aviso_spark.pushdown``), without Spark or a server."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from aviso_spark.fields import FieldSpec
from aviso_spark.pushdown import MAX_ALTERNATIVES, push
from aviso_spark.reader import _filter_value, unconstrained

FIELDS = {
    "destination": FieldSpec("destination", "text", "StringHandler", required=True),
    "class": FieldSpec("class", "text", "StringHandler", required=True, max_length=2),
    "domain": FieldSpec(
        "domain", "enum", "EnumHandler", operators=frozenset({"eq", "in"}), values=("g", "h")
    ),
    "step": FieldSpec(
        "step",
        "integer",
        "IntHandler",
        operators=frozenset({"eq", "in", "gt", "gte", "lt", "lte", "between"}),
        bounds=(0, 100),
    ),
    "date": FieldSpec("date", "date", "DateHandler"),
    "time": FieldSpec("time", "time", "TimeHandler"),
}
COLUMNS = {"destination": "destination", "class": "class", "domain": "domain", "step": "step"}
COLUMNS |= {"date": "date", "identifier_time": "time"}


def test_equality_and_ranges_become_scalars_and_constraints() -> None:
    filters = [
        EqualTo(("destination",), "d1"),
        GreaterThanOrEqual(("step",), 10),
        LessThan(("step",), 20),
        In(("domain",), ("g", "h", "zz")),
    ]
    pushed, remaining = push(filters, FIELDS, COLUMNS)
    assert pushed.identifier == {
        "destination": "d1",
        "step": {"between": [10, 19]},
        "domain": {"in": ["g", "h"]},
    }
    # Spark checks them again: the server canonicalises, Spark compares exactly.
    assert remaining == filters


def test_one_sided_ranges_are_clamped_to_the_handlers_range() -> None:
    pushed, _ = push([GreaterThan(("step",), 95)], FIELDS, COLUMNS)
    assert pushed.identifier == {"step": {"gte": 96}}
    pushed, _ = push([GreaterThan(("step",), -5), LessThan(("step",), 7)], FIELDS, COLUMNS)
    assert pushed.identifier == {"step": {"lte": 6}}  # -5 is outside the range: refused
    pushed, _ = push([LessThanOrEqual(("step",), 1000)], FIELDS, COLUMNS)
    assert pushed.identifier == {}  # every value the field can hold


@pytest.mark.parametrize(
    "item",
    [
        GreaterThan(("step",), 100),
        EqualTo(("step",), 101),
        EqualTo(("domain",), "zz"),
        EqualTo(("class",), "odd"),  # longer than max_length
        In(("destination",), ()),
    ],
)
def test_a_filter_nothing_stored_can_match_empties_the_read(item: object) -> None:
    pushed, _ = push([item], FIELDS, COLUMNS)  # type: ignore[list-item]
    assert pushed.empty


def test_sequence_bounds_are_pushed_exactly_and_not_checked_again() -> None:
    filters = [GreaterThan(("sequence",), 5), LessThanOrEqual(("sequence",), 9)]
    pushed, remaining = push(filters, FIELDS, COLUMNS)
    assert (pushed.first, pushed.last, remaining) == (6, 9, [])
    pushed, remaining = push([In(("sequence",), (3, 8))], FIELDS, COLUMNS)
    assert (pushed.first, pushed.last) == (3, 8) and len(remaining) == 1


def test_time_bounds_become_dates() -> None:
    start = datetime.datetime(2026, 4, 1, tzinfo=datetime.UTC)
    end = datetime.datetime(2026, 4, 2, tzinfo=datetime.UTC)
    filters = [GreaterThanOrEqual(("time",), start), LessThan(("time",), end)]
    pushed, remaining = push(filters, FIELDS, COLUMNS)
    assert (pushed.from_time, pushed.to_time) == (start, end)
    assert remaining == filters


def test_in_on_text_and_a_date_range_fan_out_to_several_replays() -> None:
    filters = [
        In(("destination",), ("a", "b")),
        GreaterThanOrEqual(("date",), datetime.date(2026, 4, 1)),
        LessThanOrEqual(("date",), datetime.date(2026, 4, 3)),
    ]
    pushed, _ = push(filters, FIELDS, COLUMNS)
    alternatives = pushed.alternatives({"class": "od"})
    assert len(alternatives) == 6
    assert {"class": "od", "destination": "b", "date": "2026-04-02"} in alternatives


def test_a_fan_out_past_the_cap_is_left_to_spark() -> None:
    days = MAX_ALTERNATIVES + 1
    filters = [
        GreaterThanOrEqual(("date",), datetime.date(2026, 1, 1)),
        LessThan(("date",), datetime.date(2026, 1, 1) + datetime.timedelta(days=days)),
    ]
    pushed, _ = push(filters, FIELDS, COLUMNS)
    assert pushed.alternatives({}) == [{}]


@pytest.mark.parametrize(
    "item",
    [
        EqualTo(("destination",), "d*"),  # '*' would be a wildcard on the server
        EqualTo(("identifier_time",), "0000"),  # a plugin-style handler: never pushed
        StringStartsWith(("destination",), "d"),
        Not(EqualTo(("destination",), "d1")),
        EqualTo(("payload",), "{}"),
    ],
)
def test_what_the_server_cannot_do_stays_in_spark(item: object) -> None:
    pushed, remaining = push([item], FIELDS, COLUMNS)  # type: ignore[list-item]
    assert pushed.identifier == {} and pushed.choices == {} and not pushed.empty
    assert remaining == [item]


def test_required_fields_not_named_match_anything() -> None:
    assert unconstrained({"class": "od"}, FIELDS) == {"class": "od", "destination": "*"}
    assert unconstrained({}, FIELDS, asked=["destination"]) == {"class": "*"}


def test_an_option_value_the_server_cannot_honour_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"option 'identifier.destination' = 'foo-\*'"):
        _filter_value("identifier.destination", "foo-*")
    assert _filter_value("identifier.destination", "*") == "*"
    assert _filter_value("identifier.step", '{"gte": 3}') == {"gte": 3}

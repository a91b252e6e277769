"""The JSON-value forms of coordinates: polygon, point and point-cloud
arrays, strings holding them, and the canonical JSON."""

import json
from typing import Any

import pytest

from aviso_plugins._shared.geometry import (
    coordinates_json,
    parse_point_cloud_value,
    parse_point_value,
    parse_polygon_value,
)

SQUARE = [(0.0, 0.0), (0.0, 10.0), (10.0, 10.0), (10.0, 0.0), (0.0, 0.0)]


@pytest.mark.parametrize(
    "value",
    [
        [list(pair) for pair in SQUARE],
        [[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]],
        "[[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]]",
        " [[0,0],[0,10],[10,10],[10,0],[0,0]]",
        "(0,0,0,10,10,10,10,0,0,0)",
    ],
    ids=["floats", "integers", "json-text", "json-text-padded", "legacy-text"],
)
def test_polygon_forms(value: Any) -> None:
    assert parse_polygon_value(value) == SQUARE


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ([0, 0, 0, 10, 10, 10, 0, 0], "expected a [lat, lon] pair at index 0, got number"),
        ({"type": "Polygon"}, "must be an array of [lat, lon] pairs or a string, got object"),
        (5, "got number"),
        (True, "got boolean"),
        ([[0, 0], [0, 10], [10, 10], [0, 1]], "not closed"),
        ([[0, 0], [0, 10], [0, 0]], "at least 4 coordinate pairs required, got 3"),
        ([[0, 0], [True, 10], [10, 10], [0, 0]], "coordinates must be numbers at index 1"),
        ([[0, 0], [0, 10], [10, 10], [0, 0, 0]], "pair at index 3, got an array of 3 values"),
        ([[0, 0], [0, 10], [10, 10], None], "got null"),
        ([[0, 0], [0, 10], [-90.5, 10], [0, 0]], "latitude -90.5 at index 2 is outside"),
        ([[0, 0], [0, 10], [10, 180.5], [0, 0]], "longitude 180.5 at index 2 is outside"),
        ([[0, 0], [0, 10], [10, 10**400], [0, 0]], "coordinates must be finite at index 2"),
        ([[0, 0], [0, 10], [10, float("nan")], [0, 0]], "coordinates must be finite at index 2"),
        ("[[0, 0], [0, 10]", "polygon string starting with '[' is not valid JSON"),
        ('"[[0,0]]"', "invalid coordinate"),
    ],
)
def test_polygon_refusals(value: Any, reason: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_polygon_value(value)
    assert reason in str(caught.value)


def test_vertex_limit_is_checked_before_the_coordinates() -> None:
    too_many = [["not", "numbers"]] * 6
    with pytest.raises(ValueError, match=r"polygon has 6 vertices, maximum is 5 \(limits"):
        parse_polygon_value(too_many, max_vertices=5)
    with pytest.raises(ValueError, match="polygon has 6 vertices, maximum is 5"):
        parse_polygon_value("0,0," * 5 + "0,0", max_vertices=5)
    assert parse_polygon_value([list(pair) for pair in SQUARE], max_vertices=5) == SQUARE


@pytest.mark.parametrize("value", [[47.3, 8.5], [47, 8], "47.3,8.5", "[47.3, 8.5]"])
def test_point_forms(value: Any) -> None:
    assert parse_point_value(value) in {(47.3, 8.5), (47.0, 8.0)}


@pytest.mark.parametrize("value", [[47.3], [47.3, 8.5, 1], ["47.3", "8.5"], [91, 0], {}, None])
def test_point_refusals(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_point_value(value)


def test_point_cloud_keeps_order_and_duplicates() -> None:
    cloud = [[1, 2], [1, 2], [-3.5, 4]]
    assert parse_point_cloud_value(cloud) == [(1.0, 2.0), (1.0, 2.0), (-3.5, 4.0)]


@pytest.mark.parametrize("value", ["1,2,3,4", "[[1, 2]]", [], [[1.0]], [[91, 0]], [1.0, 2.0]])
def test_point_cloud_refusals(value: Any) -> None:
    with pytest.raises(ValueError):
        parse_point_cloud_value(value)


def test_canonical_json_is_compact_with_float_numbers() -> None:
    text = coordinates_json([(47.0, 8.0), (-0.5, 1e-05)])
    assert text == "[[47.0,8.0],[-0.5,1e-05]]"
    assert json.loads(text) == [[47.0, 8.0], [-0.5, 1e-05]]

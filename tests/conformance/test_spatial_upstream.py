"""Spatial identifiers as aviso-server 0.11+ has them: coordinate arrays in,
arrays out, and the point-cloud field, over HTTP on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyaviso
import pytest

from tests.conformance.schema_support import (
    NOTIFY,
    REPLAY,
    SQUARE,
    SQUARE_ARRAY,
    WATCH,
    Harness,
    serve,
    unique_tag,
)
from tests.support.configs import ForBackend

TAG = {"type": "StringHandler", "required": True}
DOCUMENT: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {"kind": "in_memory", "in_memory": {"max_history_per_topic": 1000}},
    "limits": {"max_polygon_vertices": 50},
    "notification_schema": {
        "zone": {
            "topic": {"base": "zone", "key_order": ["tag"]},
            "identifier": {"tag": TAG, "polygon": {"type": "PolygonHandler", "required": True}},
        },
        "swath": {
            "topic": {"base": "swath", "key_order": ["tag"]},
            "identifier": {
                "tag": TAG,
                "point_cloud": {"type": "PointCloudHandler", "required": True, "max_points": 40},
            },
        },
        "big_swath": {
            "topic": {"base": "bigswath", "key_order": ["tag"]},
            "identifier": {
                "tag": TAG,
                "point_cloud": {"type": "PointCloudHandler", "required": True},
            },
        },
    },
}
FAR = [[20.0, 20.0], [20.0, 30.0], [30.0, 30.0], [30.0, 20.0], [20.0, 20.0]]


@pytest.fixture(scope="module")
def spatial(for_backend: ForBackend) -> Iterator[Harness]:
    with serve(for_backend(DOCUMENT)) as harness:
        yield harness


def ring(vertices: int) -> list[list[float]]:
    """A closed ring of ``vertices`` pairs (the closing pair included) around 5,5."""
    points = [[5.0 + (index % 2), 5.0 + index * 0.001] for index in range(vertices - 1)]
    return [*points, points[0]]


# -- polygon input forms and output --------------------------------------------------------


@pytest.mark.parametrize(
    "polygon",
    [SQUARE_ARRAY, json.dumps(SQUARE_ARRAY), SQUARE, [[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]]],
    ids=["array", "json-string", "legacy-string", "integers"],
)
def test_polygon_forms_are_accepted_and_delivered_as_arrays(spatial: Harness, polygon: Any) -> None:
    tag = unique_tag()
    spatial.notify_ok("zone", {"tag": tag, "polygon": polygon})
    spatial.notify_ok("zone", {"tag": tag, "polygon": FAR})
    # Every filter form selects the same notification; the identifier shows numbers.
    for query in (SQUARE_ARRAY, SQUARE, json.dumps(SQUARE_ARRAY)):
        delivered = spatial.replay_identifiers("zone", {"tag": tag, "polygon": query})
        assert delivered == [{"tag": tag, "polygon": SQUARE_ARRAY}], query
    for point in ([5, 5], "5,5", "[5, 5]"):
        delivered = spatial.replay_values("zone", {"tag": tag, "point": point}, "polygon")
        assert delivered == [SQUARE_ARRAY], point


def test_pyaviso_example_polygon(spatial: Harness) -> None:
    tag = unique_tag()
    polygon = [[47.0, 8.0], [47.6, 8.0], [47.6, 8.9], [47.0, 8.0]]
    spatial.notify_ok("zone", {"tag": tag, "polygon": polygon})
    assert spatial.replay_values("zone", {"tag": tag, "polygon": polygon}, "polygon") == [polygon]


@pytest.mark.parametrize("path", [NOTIFY, WATCH, REPLAY])
@pytest.mark.parametrize(
    ("polygon", "reason"),
    [
        ([0, 0, 0, 10, 10, 10, 0, 0], "expected a [lat, lon] pair at index 0, got number"),
        ([[0, 0], [0, 10], [10, 10], [0, 0.5]], "polygon is not closed"),
        ([[0, 0], [0, 10], [0, 0]], "at least 4 coordinate pairs required, got 3"),
        ([[91, 0], [0, 10], [10, 10], [91, 0]], "latitude 91.0 at index 0 is outside [-90, 90]"),
        ([[0, 181], [0, 10], [10, 10], [0, 181]], "longitude 181.0 at index 0 is outside"),
        ([[0, "1"], [0, 10], [10, 10], [0, "1"]], "coordinates must be numbers at index 0"),
        ([[0, 0, 0], [0, 10], [10, 10], [0, 0]], "got an array of 3 values"),
        ("[[0, 0], [0, 10]", "polygon string starting with '[' is not valid JSON"),
        (ring(51), "polygon has 51 vertices, maximum is 50 (limits.max_polygon_vertices)"),
        (
            ",".join(f"{lat},{lon}" for lat, lon in ring(51)),
            "polygon has 51 vertices, maximum is 50 (limits.max_polygon_vertices)",
        ),
    ],
    ids=[
        "flat",
        "open",
        "three-pairs",
        "latitude",
        "longitude",
        "string-number",
        "triple",
        "bad-json",
        "too-many-vertices",
        "too-many-vertices-text",
    ],
)
def test_bad_polygons_are_refused(spatial: Harness, path: str, polygon: Any, reason: str) -> None:
    error = spatial.rejected(path, "zone", {"tag": unique_tag(), "polygon": polygon})
    assert error["message"].startswith("field 'polygon' must be a valid polygon: "), error
    assert reason in error["message"], error


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (NOTIFY, "Field 'polygon' constraint object is not supported for notify operation"),
        (WATCH, "Field 'polygon' does not support constraint filters; expected a "),
        (REPLAY, "Field 'polygon' does not support constraint filters; expected a "),
    ],
)
@pytest.mark.parametrize(
    "polygon",
    [{"type": "Polygon", "coordinates": [SQUARE_ARRAY]}, {"eq": SQUARE}],
    ids=["geojson", "constraint"],
)
def test_objects_are_refused_as_polygons(
    spatial: Harness, path: str, message: str, polygon: dict[str, Any]
) -> None:
    error = spatial.rejected(path, "zone", {"tag": unique_tag(), "polygon": polygon})
    assert error["message"].startswith(message), error


def test_a_polygon_at_the_vertex_limit_is_accepted(spatial: Harness) -> None:
    tag = unique_tag()
    spatial.notify_ok("zone", {"tag": tag, "polygon": ring(50)})
    assert len(spatial.replay_identifiers("zone", {"tag": tag, "polygon": ring(50)})) == 1


@pytest.mark.parametrize("path", [WATCH, REPLAY])
def test_polygon_and_point_together_are_refused(spatial: Harness, path: str) -> None:
    identifier = {"tag": "t", "polygon": SQUARE_ARRAY, "point": [5, 5]}
    error = spatial.rejected(path, "zone", identifier)
    assert error["message"].startswith(
        "Cannot specify both identifier.polygon and identifier.point"
    )


# -- point clouds --------------------------------------------------------------------------


def test_point_cloud_matching_and_delivery(spatial: Harness) -> None:
    tag = unique_tag()
    inside = [[25.0, 25.0], [5.0, 5.0], [5.0, 5.0]]  # order and duplicates kept
    on_vertex = [[40.0, 40.0], [10.0, 10.0]]
    on_edge = [[0.0, 5.0]]
    outside = [[20.0, 20.0], [-1.0, 5.0]]
    for cloud in (inside, on_vertex, on_edge, outside):
        spatial.notify_ok("swath", {"tag": tag, "point_cloud": cloud})
    for query in (SQUARE_ARRAY, SQUARE):
        delivered = spatial.replay_identifiers("swath", {"tag": tag, "polygon": query})
        # The request polygon is not copied into the emitted identifier.
        assert delivered == [
            {"tag": tag, "point_cloud": cloud} for cloud in (inside, on_vertex, on_edge)
        ]
    [record] = [
        record
        for record in spatial.stored(["swath", tag])
        if record.metadata["spatial_point_cloud"] == "[[40.0,40.0],[10.0,10.0]]"
    ]
    assert record.metadata["spatial_bbox"] == "10,10,40,40"
    # Stored once: the identifier entry leaves the cloud to its own entry.
    assert json.loads(record.metadata["identifier"]) == {"tag": tag}


def test_live_watch_on_a_point_cloud_schema(spatial: Harness) -> None:
    tag = unique_tag()
    with spatial.live("swath", {"tag": tag, "polygon": SQUARE_ARRAY}) as watch:
        spatial.notify_ok("swath", {"tag": tag, "point_cloud": [[50.0, 50.0]]})
        spatial.notify_ok("swath", {"tag": tag, "point_cloud": [[50.0, 50.0], [1.0, 1.0]]})
        [event] = watch.notifications_until(lambda event: True)
    assert event["data"]["identifier"]["point_cloud"] == [[50.0, 50.0], [1.0, 1.0]]


@pytest.mark.parametrize(
    ("cloud", "message"),
    [
        (
            [[1.0, 1.0]] * 41,
            "field 'point_cloud' point cloud contains 41 points, maximum is 40",
        ),
        # The count is checked before the points themselves.
        ([["x"]] * 41, "field 'point_cloud' point cloud contains 41 points, maximum is 40"),
        ("1,2,3,4", "field 'point_cloud' must be a valid point cloud: "),
        ("[[1, 2]]", "field 'point_cloud' must be a valid point cloud: "),
        ([], "field 'point_cloud' must be a valid point cloud: "),
        ([[1.0]], "field 'point_cloud' must be a valid point cloud: "),
        ([[91, 0]], "field 'point_cloud' must be a valid point cloud: latitude 91.0"),
        ([1.0, 2.0], "field 'point_cloud' must be a valid point cloud: "),
    ],
    ids=["count", "count-first", "text", "json-text", "empty", "short-pair", "range", "flat"],
)
def test_bad_point_clouds_are_refused(spatial: Harness, cloud: Any, message: str) -> None:
    error = spatial.rejected(NOTIFY, "swath", {"tag": "t", "point_cloud": cloud})
    assert error["message"].startswith(message), error


def test_point_cloud_canonical_size_limit(spatial: Harness) -> None:
    # 3,000 points of 17-digit coordinates: under max_points (10,000), over 61,440 bytes.
    cloud = [[12.345678901234567, 123.45678901234567]] * 3000
    size = len(json.dumps(cloud, separators=(",", ":")))
    error = spatial.rejected(NOTIFY, "big_swath", {"tag": "t", "point_cloud": cloud})
    assert error["message"] == (
        f"field 'point_cloud' point cloud canonical JSON is {size} bytes, maximum is 61440 bytes"
    )


@pytest.mark.parametrize("path", [WATCH, REPLAY])
@pytest.mark.parametrize(
    ("identifier", "message"),
    [
        ({"point_cloud": [[1.0, 1.0]]}, "identifier.point_cloud is only supported for notify"),
        ({"point": [5, 5]}, "identifier.point is not supported for point-cloud schemas"),
        ({}, "Required field 'point_cloud' missing for "),
        ({"polygon": [1, 2, 3]}, "field 'polygon' must be a valid polygon: "),
    ],
    ids=["point-cloud", "point", "missing", "bad-polygon"],
)
def test_point_cloud_stream_requests_refused(
    spatial: Harness, path: str, identifier: dict[str, Any], message: str
) -> None:
    error = spatial.rejected(path, "swath", {"tag": "t", **identifier})
    assert error["message"].startswith(message), error


# -- ECMWF's client ------------------------------------------------------------------------


def test_pyaviso_sends_and_receives_coordinate_arrays(spatial: Harness) -> None:
    """pyaviso 2.4.2 sends spatial values as arrays verbatim (notify and filters) and hands
    the delivered identifier through."""
    tag = unique_tag()
    polygon = [[47.0, 8.0], [47.6, 8.0], [47.6, 8.9], [47.0, 8.0]]
    with pyaviso.AvisoClient(base_url=spatial.server.url) as client:
        client.notify(event_type="zone", identifier={"tag": tag, "polygon": polygon})
        client.notify(event_type="zone", identifier={"tag": tag, "polygon": FAR})
        client.notify(event_type="swath", identifier={"tag": tag, "point_cloud": [[47.3, 8.2]]})
        spatial_filters = [
            ("zone", {"tag": tag, "point": [47.5, 8.3]}),
            ("zone", {"tag": tag, "polygon": [[47.1, 8.1], [47.2, 8.1], [47.2, 8.2], [47.1, 8.1]]}),
            ("swath", {"tag": tag, "polygon": polygon}),
        ]
        received = []
        for event_type, selection in spatial_filters:
            request = pyaviso.WatchRequest.replay_only(event_type, 0).with_filter(selection)
            with client.listen(request=request) as notifications:
                received.append([notification.identifier for notification in notifications])
    assert received == [
        [{"tag": tag, "polygon": polygon}],
        [{"tag": tag, "polygon": polygon}],
        [{"tag": tag, "point_cloud": [[47.3, 8.2]]}],
    ]

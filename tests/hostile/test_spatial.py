"""Hostile spatial input: polygons and point clouds at and over their caps, and
worst-case spatial replays that must not stall the service for everybody else."""

from __future__ import annotations

import datetime
import json
import math
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.hostile.support import assert_client_error, assert_still_serving
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.server import RunningServer, running_server
from tests.support.sse import Stream

MAX_VERTICES = 10_000  # limits.max_polygon_vertices, default
MAX_POINTS = 10_000  # PointCloudHandler max_points, default and ceiling
STORED_BYTES = 61_440  # canonical bytes of a stored polygon or point cloud

DOCUMENT = with_changes(
    API_EXAMPLE,
    notification_schema={
        "swath": {
            "topic": {"base": "swath", "key_order": ["tag"]},
            "identifier": {
                "tag": {"type": "StringHandler", "required": True},
                "point_cloud": {"type": "PointCloudHandler", "required": True},
            },
        },
    },
    # Unpaced, so that the replay's one batch of heavy records is all there is to wait for.
    watch_endpoint={"replay_batch_delay_ms": 0},
)


@pytest.fixture(scope="module")
def spatial_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    with running_server(for_backend(DOCUMENT)) as server:
        yield server


@pytest.fixture
def client(spatial_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=spatial_server.url, timeout=60.0) as http:
        yield http


def circle(vertices: int, radius: float, lat: float = 45.0, lon: float = 10.0) -> list[list[float]]:
    """A closed ring of ``vertices`` pairs (closing pair included), short coordinates so that
    a maximum-size polygon stays well inside the request body limit."""
    step = 2 * math.pi / (vertices - 1)
    ring = [
        [round(lat + radius * math.sin(i * step), 4), round(lon + radius * math.cos(i * step), 4)]
        for i in range(vertices - 1)
    ]
    return [*ring, ring[0]]


def canonical_bytes(coordinates: list[list[float]]) -> int:
    return len(json.dumps(coordinates, separators=(",", ":")))


def polygon_at_the_byte_cap(radius: float) -> list[list[float]]:
    """The stored polygon with the most vertices under 61,440 canonical bytes."""
    vertices = MAX_VERTICES
    while canonical_bytes(circle(vertices, radius)) > STORED_BYTES:
        vertices -= 50
    return circle(vertices, radius)


def point_cloud_at_the_byte_cap() -> list[list[float]]:
    """The largest cloud under 61,440 canonical bytes, points scattered around 45,10."""
    points: list[list[float]] = []
    size = 1
    for index in range(MAX_POINTS):
        point = [round(44.0 + (index * 7 % 200) / 100, 2), round(9.0 + (index * 13 % 200) / 100, 2)]
        size += len(json.dumps(point, separators=(",", ":"))) + 1
        if size > STORED_BYTES:
            break
        points.append(point)
    return points


def notify(client: httpx.Client, event_type: str, identifier: dict[str, Any]) -> httpx.Response:
    body = {"event_type": event_type, "identifier": identifier, "payload": "heavy"}
    return client.post("/api/v1/notification", content=json.dumps(body))


# -- caps ---------------------------------------------------------------------------------


def test_stored_polygon_over_its_caps_is_refused(client: httpx.Client) -> None:
    identifier = {"date": "20260402", "time": "0"}
    answer = notify(client, "storm_cell", {**identifier, "polygon": circle(MAX_VERTICES + 1, 1)})
    assert_client_error(answer, 400, "INVALID_NOTIFICATION_REQUEST")
    assert "maximum is 10000 (limits.max_polygon_vertices)" in answer.json()["message"]
    # Under the vertex cap, over the stored size (one JetStream header block).
    polygon = circle(MAX_VERTICES, 1.0)
    answer = notify(client, "storm_cell", {**identifier, "polygon": polygon})
    assert_client_error(answer, 400, "INVALID_NOTIFICATION_REQUEST")
    assert answer.json()["message"] == (
        f"field 'polygon' is {canonical_bytes(polygon)} bytes, maximum is 61440 bytes for a "
        "stored spatial value"
    )
    assert_still_serving(client)


@pytest.mark.parametrize(
    ("path", "code"),
    [("/api/v1/watch", "INVALID_WATCH_REQUEST"), ("/api/v1/replay", "INVALID_REPLAY_REQUEST")],
)
def test_filter_polygon_over_the_vertex_cap_is_refused(
    client: httpx.Client, path: str, code: str
) -> None:
    polygon = circle(MAX_VERTICES + 1, 1.0)
    for event_type, identifier in [
        ("storm_cell", {"polygon": polygon}),
        ("swath", {"tag": "t", "polygon": polygon}),
    ]:
        body = {"event_type": event_type, "identifier": identifier, "from_id": "1"}
        answer = client.post(path, content=json.dumps(body))
        assert_client_error(answer, 400, code)
        assert "maximum is 10000 (limits.max_polygon_vertices)" in answer.json()["message"]
    assert_still_serving(client)


DEGENERATE_SHAPES = [
    [],
    [[]],
    [[1]],
    [[1, 2]],
    [[[]]],
    [[]] * 4,
    [[1, 2]] * 3,
    [[1e308, 1e308]] * 4,
    [[-(10**30), 10**30]] * 4,
    "[]",
    "[[NaN, 1], [1, 1], [1, 1], [NaN, 1]]",
    "[[Infinity, 1], [1, 1], [1, 1], [Infinity, 1]]",
    "[[1" + "0" * 5000 + ", 1]]",
    "[[1, 2]",
    "[" * 5000,
    "",
    "()",
]
"""Empty and broken coordinate lists, nested empties, NaN, infinities, huge numbers, numbers
beyond Python's integer-string limit, text that is no JSON. (A number beyond a double in the
request itself makes the body invalid JSON, answered before any field is read.)"""
STREAM_CODES = {
    "/api/v1/watch": "INVALID_WATCH_REQUEST",
    "/api/v1/replay": "INVALID_REPLAY_REQUEST",
    "/api/v1/aggregate": "INVALID_AGGREGATE_REQUEST",
}
# What a library's own error text would show (numpy, json, int()).
LIBRARY_TEXTS = (
    "too many indices",
    "Expecting",
    "Exceeds the limit",
    "set_int_max_str_digits",
    "char ",
)


def assert_refused_naming(answer: httpx.Response, code: str, field: str) -> None:
    assert_client_error(answer, 400, code)
    message = answer.json()["message"]
    assert f"'{field}'" in message, message
    assert not any(text in answer.text for text in LIBRARY_TEXTS), answer.text


@pytest.mark.parametrize("shape", DEGENERATE_SHAPES, ids=range(len(DEGENERATE_SHAPES)))
def test_a_degenerate_polygon_is_a_400_naming_the_field_everywhere(
    client: httpx.Client, shape: Any
) -> None:
    identifier = {"date": "20260402", "time": "0", "polygon": shape}
    assert_refused_naming(
        notify(client, "storm_cell", identifier), "INVALID_NOTIFICATION_REQUEST", "polygon"
    )
    for path, code in STREAM_CODES.items():
        for event_type, filter_ in [
            ("storm_cell", {"polygon": shape}),
            ("swath", {"tag": "t", "polygon": shape}),
        ]:
            body: dict[str, Any] = {"event_type": event_type, "identifier": filter_}
            if path != "/api/v1/watch":
                body["from_id"] = "1"
            if path == "/api/v1/aggregate":
                body["group_by"] = ["time" if event_type == "storm_cell" else "tag"]
            answer = client.post(path, content=json.dumps(body))
            assert_refused_naming(answer, code, "polygon")
    assert_still_serving(client)


DEGENERATE_CLOUDS = [shape for shape in DEGENERATE_SHAPES if shape not in ([[1, 2]], [[1, 2]] * 3)]
"""The same, less the one- and three-point lists: those are clouds."""


@pytest.mark.parametrize("shape", DEGENERATE_CLOUDS, ids=range(len(DEGENERATE_CLOUDS)))
def test_a_degenerate_point_cloud_is_a_400_naming_the_field(
    client: httpx.Client, shape: Any
) -> None:
    answer = notify(client, "swath", {"tag": "t", "point_cloud": shape})
    assert_refused_naming(answer, "INVALID_NOTIFICATION_REQUEST", "point_cloud")


def test_point_cloud_over_its_caps_is_refused(client: httpx.Client) -> None:
    too_many = [[45.0, 10.0]] * (MAX_POINTS + 1)
    answer = notify(client, "swath", {"tag": "t", "point_cloud": too_many})
    assert_client_error(answer, 400, "INVALID_NOTIFICATION_REQUEST")
    assert answer.json()["message"] == (
        "field 'point_cloud' point cloud contains 10001 points, maximum is 10000"
    )
    too_big = [[45.123456, 10.123456]] * 4000
    answer = notify(client, "swath", {"tag": "t", "point_cloud": too_big})
    assert_client_error(answer, 400, "INVALID_NOTIFICATION_REQUEST")
    assert "maximum is 61440 bytes" in answer.json()["message"]
    assert_still_serving(client)


# -- worst-case replays -------------------------------------------------------------------


class Replay(threading.Thread):
    """Reads one replay stream to its end, signalling its opening and its first result."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(name="heavy-replay", daemon=True)
        self.url = url
        self.body = body
        self.opened = threading.Event()
        self.first_result = threading.Event()
        self.delivered = 0
        self.kinds: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            timeout = httpx.Timeout(60.0, read=60.0)
            with (
                httpx.Client(base_url=self.url, timeout=timeout) as http,
                http.stream("POST", "/api/v1/replay", content=json.dumps(self.body)) as response,
            ):
                assert response.status_code == 200, response.read()
                for event in Stream(response).events():
                    self.kinds.append(event.kind)
                    if event.kind == "replay-control/replay_started":
                        self.opened.set()
                    elif event.kind == "replay":
                        self.first_result.set()
                        self.delivered += 1
                    elif event.kind == "connection-closing":
                        break
        except BaseException as exc:  # reported by the test thread
            self.failure = exc
        finally:
            self.opened.set()


def store_heavy(client: httpx.Client, event_type: str, records: list[dict[str, Any]]) -> None:
    for identifier in records:
        answer = notify(client, event_type, identifier)
        assert answer.status_code == 200, answer.text


@pytest.mark.heavy  # a worst-case replay: tens of seconds each
@pytest.mark.parametrize("kind", ["polygons", "point_clouds"])
def test_health_answers_during_a_worst_case_spatial_replay(
    spatial_server: RunningServer, client: httpx.Client, kind: str
) -> None:
    """One full batch (replay_batch_size = 100) of maximum-size stored geometries matched
    against a maximum-size filter polygon: ``/health`` must answer while that batch is
    being matched, i.e. before the replay's first notification arrives (every record
    matches, and a batch is delivered once it has been matched). Matching the batch on
    the event loop fails this: ``/health`` then waits for the whole batch."""
    tag = f"heavy{uuid.uuid4().hex[:12]}"
    if kind == "polygons":
        event_type = "storm_cell"
        day = (
            datetime.date(2200, 1, 1) + datetime.timedelta(uuid.uuid4().int % 30_000)
        ).isoformat()
        # Concentric with the filter, so every record matches and is delivered.
        ring = polygon_at_the_byte_cap(0.5)
        records = [{"date": day, "time": "0", "polygon": ring} for _ in range(100)]
        query: dict[str, Any] = {"date": day, "polygon": circle(MAX_VERTICES, 1.0)}
    else:
        event_type = "swath"
        cloud = point_cloud_at_the_byte_cap()
        records = [{"tag": tag, "point_cloud": cloud} for _ in range(100)]
        # Only the last point of each cloud lies inside the filter: every point is tested.
        query = {"tag": tag, "polygon": circle(MAX_VERTICES, 0.001, *cloud[-1])}
    store_heavy(client, event_type, records)
    body = {"event_type": event_type, "identifier": query, "from_id": "1"}
    replay = Replay(spatial_server.url, body)
    replay.start()
    assert replay.opened.wait(60), "the replay never opened"
    health = client.get("/health")
    answered_while_matching = not replay.first_result.is_set()
    replay.join(120)
    assert replay.failure is None, replay.failure
    assert health.status_code == 200
    assert answered_while_matching, "/health waited for the spatial matching of a batch"
    assert replay.delivered == len(records), replay.kinds[-3:]
    assert "replay-control/replay_completed" in replay.kinds
    assert_still_serving(client)

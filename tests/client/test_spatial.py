"""Spatial identifiers through pyaviso:
polygons and points as JSON arrays on notify, watch and replay, point clouds on a
``PointCloudHandler`` schema, and spatial values emitted as arrays in the CloudEvent.

Fails on a branch without array-form spatial identifiers and PointCloudHandler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyaviso
import pytest

from tests.client.support import client_env, run
from tests.support.configs import ForBackend
from tests.support.server import RunningServer, running_server

SQUARE = [[0, 0], [0, 10], [10, 10], [10, 0], [0, 0]]
AROUND_FIFTY = [[45, 45], [45, 55], [55, 55], [55, 45], [45, 45]]
FAR_AWAY = [[-60, -60], [-60, -50], [-50, -50], [-50, -60], [-60, -60]]

CONFIG = {
    "application": {"host": "127.0.0.1", "port": 0},
    "notification_backend": {
        "kind": "in_memory",
        "in_memory": {"max_history_per_topic": 1000, "max_topics": 1000},
    },
    "watch_endpoint": {"replay_batch_delay_ms": 0},
    "notification_schema": {
        "area": {
            "payload": {"required": False},
            "topic": {"base": "area", "key_order": ["name"]},
            "identifier": {
                "name": {"type": "StringHandler", "required": True},
                "polygon": {"type": "PolygonHandler", "required": False},
            },
        },
        "cloud": {
            "payload": {"required": False},
            "topic": {"base": "cloud", "key_order": ["name"]},
            "identifier": {
                "name": {"type": "StringHandler", "required": True},
                "point_cloud": {"type": "PointCloudHandler", "required": True, "max_points": 100},
            },
        },
    },
}


@pytest.fixture(scope="module")
def spatial_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    with running_server(for_backend(CONFIG)) as server:
        yield server


def _replay(server: RunningServer, event_type: str, where: dict[str, Any]) -> list[Any]:
    with pyaviso.AvisoClient(base_url=server.url, auth=pyaviso.Anonymous()) as client:
        return list(client.listen(event_type, filter=where, start_from=0, mode="replay_only"))


def _pairs(value: Any) -> list[list[float]]:
    return [[float(lat), float(lon)] for lat, lon in value]


def test_polygon_and_point_arrays(spatial_server: RunningServer, name: str, tmp_path: Path) -> None:
    env = client_env(tmp_path / "home", spatial_server.url)
    sent = run(
        env, "notify", f"event=area,name={name},polygon:=[[0,0],[0,10],[10,10],[10,0],[0,0]]"
    )
    assert sent.returncode == 0, sent.stderr
    [inside] = _replay(spatial_server, "area", {"name": name, "point": [5, 5]})
    assert _pairs(inside.identifier["polygon"]) == _pairs(SQUARE)
    assert inside.identifier["name"] == name
    assert _replay(spatial_server, "area", {"name": name, "point": [20, 20]}) == []
    overlapping = [[5, 5], [5, 15], [15, 15], [15, 5], [5, 5]]
    assert len(_replay(spatial_server, "area", {"name": name, "polygon": overlapping})) == 1
    assert _replay(spatial_server, "area", {"name": name, "polygon": FAR_AWAY}) == []


def test_point_clouds(spatial_server: RunningServer, name: str) -> None:
    cloud = [[1, 1], [50, 50], [1, 1]]  # duplicates allowed, order kept
    with pyaviso.AvisoClient(base_url=spatial_server.url, auth=pyaviso.Anonymous()) as client:
        client.notify(event_type="cloud", identifier={"name": name, "point_cloud": cloud})
        where = {"name": name, "polygon": AROUND_FIFTY}
        with client.listen("cloud", filter=where, start_from=0) as live:
            assert _pairs(next(live).identifier["point_cloud"]) == _pairs(cloud)
            client.notify(
                event_type="cloud", identifier={"name": name, "point_cloud": [[-55, -55]]}
            )
            client.notify(event_type="cloud", identifier={"name": name, "point_cloud": [[50, 49]]})
            assert _pairs(next(live).identifier["point_cloud"]) == [[50.0, 49.0]]
    [matched, _] = _replay(spatial_server, "cloud", {"name": name, "polygon": AROUND_FIFTY})
    assert _pairs(matched.identifier["point_cloud"]) == _pairs(cloud)
    assert "polygon" not in matched.identifier
    [far] = _replay(spatial_server, "cloud", {"name": name, "polygon": FAR_AWAY})
    assert _pairs(far.identifier["point_cloud"]) == [[-55.0, -55.0]]

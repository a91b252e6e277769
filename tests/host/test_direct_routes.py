"""The edge hands a POST to notify, watch or replay straight to its endpoint, skipping the
router's loop: everything else about the request (other methods, other paths, the route a
metric is counted under) stays the router's."""

from __future__ import annotations

import json

import httpx
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aviso_host.app import api_routes, direct_routes
from tests.conformance.metrics_support import with_metrics
from tests.support.configs import API_EXAMPLE
from tests.support.server import running_server

NOTIFICATION = {
    "event_type": "river_gauge",
    "identifier": {"basin": "direct", "date": "20260402", "level": 4},
    "payload": {"n": 1},
}


async def _plain(request: object) -> PlainTextResponse:
    return PlainTextResponse("plain")


def test_only_the_hot_post_routes_ahead_of_any_pattern_are_direct() -> None:
    routes = api_routes()
    assert set(direct_routes(routes)) == {
        "/api/v1/notification",
        "/api/v1/watch",
        "/api/v1/replay",
    }
    # A route with parameters ahead could take the path: nothing after it is direct.
    shadowing = Route("/api/v1/{anything}", _plain, methods=["POST"])
    assert direct_routes([shadowing, *routes]) == {}
    # The first route of a path is the router's pick; a later one of the same path is not.
    first = Route("/api/v1/notification", _plain, methods=["POST"], name="other")
    assert "/api/v1/notification" not in direct_routes([first, *routes])


def test_other_methods_and_paths_are_still_routed() -> None:
    with (
        running_server(with_metrics(API_EXAMPLE)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        stored = client.post("/api/v1/notification", content=json.dumps(NOTIFICATION))
        assert stored.status_code == 200 and stored.json()["status"] == "success"
        wrong_method = client.put("/api/v1/notification", content=json.dumps(NOTIFICATION))
        assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
        assert client.post("/api/v1/notification/", content="{}").status_code == 404
        for response in (stored, wrong_method):
            assert response.headers["x-request-id"]
        metrics = server.service.metrics.registry
        counted = metrics.get_sample_value(
            "aviso_http_requests_total",
            {"route": "/api/v1/notification", "method": "POST", "status_code": "200"},
        )
        assert counted == 1
        notified = metrics.get_sample_value(
            "aviso_notifications_total", {"event_type": "river_gauge", "status": "success"}
        )
        assert notified == 1

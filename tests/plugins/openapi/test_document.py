"""The API description is the built-in plugin ``openapi``: its route serves the document
(compact JSON, built once), describing the host's routes; blocked, the server serves
everything else, the document's path is 404, and Swagger UI still answers, pointing at the
missing document (in a browser it then says so: ``tests/console/test_swagger_ui_page.py``)."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Iterator

import pytest
from openapi_spec_validator import validate
from starlette.exceptions import StarletteDeprecationWarning

from aviso_host.plugins import BLOCK_ENV
from aviso_plugins import hookimpl
from aviso_plugins.openapi import OpenApiContext, OpenApiContribution
from aviso_plugins.testing import build_app
from tests.support.configs import API_EXAMPLE

with warnings.catch_warnings():
    # Starlette warns when its test client falls back to httpx.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

DOCUMENT = "/api-docs/openapi.json"
HOST_PATHS = {
    "/api/v1/notification": {"post"},
    "/api/v1/watch": {"post"},
    "/api/v1/replay": {"post"},
    "/api/v1/schema": {"get"},
    "/api/v1/schema/{event_type}": {"get"},
    "/api/v1/admin/notification/{notification_id}": {"delete"},
    "/api/v1/admin/wipe/stream": {"delete"},
    "/api/v1/admin/wipe/all": {"delete"},
    "/health": {"get"},
    "/ready": {"get"},
    "/status": {"get"},
    "/": {"get"},
    "/console": {"get"},
}


@pytest.fixture
def host_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app with no plugin serving API routes: the document holds the host's parts."""
    monkeypatch.setenv(BLOCK_ENV, "subscriptions,aggregate")
    with TestClient(build_app(API_EXAMPLE)) as client:
        yield client


def test_the_document_describes_the_hosts_routes(host_only: TestClient) -> None:
    response = host_only.get(DOCUMENT)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    document = response.json()
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    assert response.content == compact.encode()
    validate(document)
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] == "Aviso Notification Service API"
    version = host_only.get("/status").json()["version"]
    assert document["info"]["version"] == version
    assert {path: set(item) for path, item in document["paths"].items()} == HOST_PATHS
    assert {tag["name"] for tag in document["tags"]} == {
        "health",
        "general",
        "schema",
        "notification",
        "streaming",
        "admin",
    }
    assert document["components"]["securitySchemes"] == {
        "bearer_jwt": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
        "basic": {"type": "http", "scheme": "basic"},
    }
    watch_ok = document["paths"]["/api/v1/watch"]["post"]["responses"]["200"]
    assert list(watch_ok["content"]) == ["text/event-stream"]


def test_the_document_is_served_without_the_docs_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "swagger_ui_bundle", None)  # as if not installed
    with TestClient(build_app(API_EXAMPLE)) as client:
        assert client.get("/swagger-ui/").status_code == 404
        assert client.get(DOCUMENT).status_code == 200


class Counting:
    """Counts the calls of ``aviso_openapi``."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def aviso_openapi(self, context: OpenApiContext) -> OpenApiContribution | None:
        self.calls += 1
        return None


def test_blocked_the_server_serves_everything_else_and_no_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "openapi")
    plugin = Counting()
    with TestClient(build_app(API_EXAMPLE, [plugin])) as client:
        assert client.get(DOCUMENT).status_code == 404
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/api/v1/schema").status_code == 200
        body = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
        notify = {**body, "identifier": {"basin": "rhine", "date": "20260402", "level": "3"}}
        assert client.post("/api/v1/notification", json={**notify, "payload": 1}).status_code == 200
        assert client.get("/api/v1/subscriptions").status_code == 200
        # Swagger UI still answers, pointing at the document, which is not there.
        page = client.get("/swagger-ui/")
        assert page.status_code == 200
        assert f'"..{DOCUMENT}"' in page.text
    # Nothing asks the plugins to describe their routes.
    assert plugin.calls == 0


def test_each_app_builds_its_document_once() -> None:
    plugin = Counting()
    with TestClient(build_app(API_EXAMPLE, [plugin])) as client:
        first = client.get(DOCUMENT).content
        assert client.get(DOCUMENT).content == first
    assert plugin.calls == 1

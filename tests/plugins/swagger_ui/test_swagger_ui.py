"""Swagger UI (the built-in plugin ``swagger_ui``) beside the host's operational routes, on a
bare Starlette app (no aviso middleware); the API description it reads is the built-in
plugin ``openapi``'s (``tests/plugins/openapi/test_document.py``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from aviso_builtins.swagger_ui.pages import routes
from aviso_host.routes.ops import ops_routes
from tests.host.routes.test_ops_routes import HTML, VERSION, TestClient


def _routes(static_dir: Path) -> list[BaseRoute]:
    """As the server composes them: the host's operational routes, then the plugin's."""
    return [*ops_routes(str(static_dir), VERSION), *routes()]


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def client(static_dir: Path) -> Iterator[TestClient]:
    app = Starlette(routes=_routes(static_dir))
    # The real application disables slash redirects; mirror it so redirects can't hide bugs.
    app.router.redirect_slashes = False
    with TestClient(app) as test_client:
        yield test_client


def test_swagger_ui_page(client: TestClient) -> None:
    response = client.get("/swagger-ui/")
    assert response.status_code == 200
    assert response.headers["content-type"] == HTML
    assert '"../api-docs/openapi.json"' in response.text
    assert "petstore" not in response.text


def test_swagger_ui_asset(client: TestClient) -> None:
    response = client.get("/swagger-ui/swagger-ui-bundle.js")
    assert response.status_code == 200
    assert "javascript" in response.headers["content-type"]
    assert len(response.content) > 100_000


def test_without_the_docs_extra_swagger_ui_names_it(
    static_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "swagger_ui_bundle", None)  # as if not installed
    app = Starlette(routes=_routes(static_dir))
    with TestClient(app) as client:
        for path in ("/swagger-ui/", "/swagger-ui/swagger-ui-bundle.js"):
            response = client.get(path)
            assert response.status_code == 404
            assert "pip install 'aviso-py[docs]'" in response.text


def test_swagger_ui_demo_initializer_is_not_served(client: TestClient) -> None:
    assert client.get("/swagger-ui/swagger-initializer.js").status_code == 404
    assert client.get("/swagger-ui/nope.js").status_code == 404

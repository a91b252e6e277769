"""Unit tests for the operational routes, on a bare Starlette app (no aviso middleware)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.exceptions import StarletteDeprecationWarning

from aviso_host.routes.ops import ops_routes

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 and warns (an error under our pytest settings) when it
    # falls back to httpx; either client serves these tests equally well.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

VERSION = "9.9.9"
HTML = "text/html; charset=utf-8"


@pytest.fixture
def static_dir(tmp_path: Path) -> Path:
    root = tmp_path / "static"
    root.mkdir()
    return root


@pytest.fixture
def client(static_dir: Path) -> Iterator[TestClient]:
    app = Starlette(routes=ops_routes(str(static_dir), VERSION))
    # The real application disables slash redirects; mirror it so redirects can't hide bugs.
    app.router.redirect_slashes = False
    with TestClient(app) as test_client:
        yield test_client


def test_health_body_is_exact(client: TestClient) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == b'{"status":"ok"}'


def test_wrong_method_is_405(client: TestClient) -> None:
    assert client.post("/health").status_code == 405


def test_home_falls_back_to_packaged_page(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == HTML
    assert VERSION in response.text
    assert "{{SERVER_VERSION}}" not in response.text
    # Relative links keep the page usable under a mount prefix.
    assert 'href="swagger-ui/"' in response.text
    assert 'href="api/v1/schema"' in response.text


def test_home_serves_configured_page_with_version(client: TestClient, static_dir: Path) -> None:
    (static_dir / "index.html").write_text(
        "<p>custom {{SERVER_VERSION}} and {{SERVER_VERSION}}</p>", encoding="utf-8"
    )
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == HTML
    assert response.text == f"<p>custom {VERSION} and {VERSION}</p>"


def test_static_file(client: TestClient, static_dir: Path) -> None:
    (static_dir / "notes.txt").write_text("hello", encoding="utf-8")
    response = client.get("/static/notes.txt")
    assert response.status_code == 200
    assert response.text == "hello"
    assert response.headers["content-type"].startswith("text/plain")


def test_static_directory_listing(client: TestClient, static_dir: Path) -> None:
    (static_dir / "docs").mkdir()
    (static_dir / "docs" / "guide.html").write_text("<p>guide</p>", encoding="utf-8")
    (static_dir / "readme.txt").write_text("x", encoding="utf-8")
    (static_dir / ".secret").write_text("x", encoding="utf-8")

    root = client.get("/static/")
    assert root.status_code == 200
    assert root.headers["content-type"] == HTML
    assert 'href="docs/"' in root.text
    assert 'href="readme.txt"' in root.text
    assert ".secret" not in root.text

    # Without a trailing slash there is no redirect; links still resolve to the right files.
    sub = client.get("/static/docs")
    assert sub.status_code == 200
    assert 'href="docs/guide.html"' in sub.text
    assert client.get("/static/docs/guide.html").text == "<p>guide</p>"


def test_static_missing_is_404(client: TestClient) -> None:
    assert client.get("/static/nope.txt").status_code == 404


@pytest.mark.parametrize(
    "path", ["/static/%2e%2e/outside.txt", "/static/..%2Foutside.txt", "/static/.secret"]
)
def test_static_refuses_traversal_and_hidden_files(
    client: TestClient, static_dir: Path, path: str
) -> None:
    (static_dir.parent / "outside.txt").write_text("private", encoding="utf-8")
    (static_dir / ".secret").write_text("private", encoding="utf-8")
    response = client.get(path)
    assert response.status_code == 404
    assert "private" not in response.text


def test_static_refuses_symlink_out_of_root(client: TestClient, static_dir: Path) -> None:
    (static_dir.parent / "outside.txt").write_text("private", encoding="utf-8")
    (static_dir / "link.txt").symlink_to(static_dir.parent / "outside.txt")
    assert client.get("/static/link.txt").status_code == 404


def test_home_links_the_console_and_reads_the_status(client: TestClient) -> None:
    page = client.get("/").text
    assert 'href="console"' in page
    assert 'fetch("status"' in page


def test_the_favicon_is_an_icon_from_the_package(client: TestClient) -> None:
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/x-icon"
    # An ICO file (reserved 0, type 1) holding one image.
    assert icon.content[:6] == b"\x00\x00\x01\x00\x01\x00"
    assert client.head("/favicon.ico").status_code == 200
    assert client.post("/favicon.ico").status_code == 405


def test_console_is_served_from_the_package(client: TestClient) -> None:
    page = client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"] == HTML
    # Nothing from elsewhere: scripts, styles and requests stay on this server.
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "http" not in page.text
    # Relative URLs, so the console works under a mount prefix.
    assert 'src="console/console.js"' in page.text
    assert 'href="console/console.css"' in page.text
    script = client.get("/console/console.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert '"api/v1/watch"' in script.text
    assert client.get("/console/console.css").headers["content-type"] == ("text/css; charset=utf-8")
    assert client.get("/console/nope.js").status_code == 404
    assert client.get("/console/..%2Fstatic.py").status_code == 404
    assert client.post("/console").status_code == 405

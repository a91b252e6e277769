"""Operational routes: health, readiness, status, landing page, the browser console and static
files (the built-in plugins ``openapi`` and ``swagger_ui`` serve the API description and
Swagger UI).

None of these is authenticated. Pages link relatively, so everything keeps working when the
application is mounted under a path prefix.
"""

from __future__ import annotations

import html
import logging
from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from aviso_host.config.settings import DEFAULT_HOMEPAGE_URLS, HomepageSettings
from aviso_host.errors import json_response
from aviso_host.logs import log_event
from aviso_plugins.api_shapes import Health, Readiness

_VERSION_PLACEHOLDER = b"{{SERVER_VERSION}}"
# ``{{CLIENT_DOCUMENTATION_URL}}`` ... : the ``application.homepage`` links.
_HOMEPAGE_FIELDS = tuple(DEFAULT_HOMEPAGE_URLS)
_DEFAULT_HOMEPAGE = HomepageSettings()

# The console's files, served from the package (no build step, nothing from a CDN).
_CONSOLE_MEDIA_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
# The console needs nothing but its own files and the API of the server that serves it.
_CONSOLE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}


def _hidden(parts: list[str]) -> bool:
    # Dot-names are never served or listed (.git, .env, ...), and ".." is one of them.
    return any(part.startswith(".") for part in parts)


def _directory_listing(directory: Path, url_path: str, at_root: bool) -> HTMLResponse:
    # Links are relative to the page; without a trailing slash the last URL segment is the
    # page's own name, so links must repeat it (no redirect to the slashed form).
    base = "" if url_path.endswith("/") else quote(url_path.rsplit("/", 1)[-1]) + "/"
    entries = sorted(
        (entry for entry in directory.iterdir() if not entry.name.startswith(".")),
        key=lambda entry: (not entry.is_dir(), entry.name),
    )
    items = [] if at_root else [f'<li><a href="{base}../">../</a></li>']
    for entry in entries:
        name = entry.name + ("/" if entry.is_dir() else "")
        items.append(f'<li><a href="{base}{quote(name)}">{html.escape(name)}</a></li>')
    title = html.escape(f"Index of {url_path}")
    listing = "\n".join(items)
    return HTMLResponse(
        f'<!doctype html>\n<html lang="en">\n<head><meta charset="utf-8"><title>{title}</title>'
        f"</head>\n<body>\n<h1>{title}</h1>\n<ul>\n{listing}\n</ul>\n</body>\n</html>\n"
    )


def _filled(page: bytes, values: dict[bytes, bytes]) -> bytes:
    for placeholder, value in values.items():
        page = page.replace(placeholder, value)
    return page


def ops_routes(
    static_files_path: str,
    version: str,
    homepage: HomepageSettings = _DEFAULT_HOMEPAGE,
) -> list[BaseRoute]:
    """The operational routes, serving ``static_files_path`` and announcing ``version``
    and the ``homepage`` links."""
    static_root = Path(static_files_path).resolve()
    values = {_VERSION_PLACEHOLDER: html.escape(version).encode()} | {
        b"{{" + name.upper().encode() + b"}}": html.escape(getattr(homepage, name)).encode()
        for name in _HOMEPAGE_FIELDS
    }
    packaged_home = files("aviso_host").joinpath("static", "index.html").read_bytes()
    fallback_home = _filled(packaged_home, values)
    console_dir = files("aviso_host").joinpath("static", "console")
    console_files = {name: console_dir.joinpath(name).read_bytes() for name in _CONSOLE_MEDIA_TYPES}
    favicon_ico = files("aviso_host").joinpath("static", "favicon.ico").read_bytes()

    async def health(request: Request) -> Response:
        body: Health = {"status": "ok"}
        return json_response(body, sort_keys=False)

    async def ready(request: Request) -> Response:
        if await request.app.state.service.backend.ready():
            body: Readiness = {"status": "ready", "backend_connected": True}
            return json_response(body, sort_keys=False)
        body = {"status": "not_ready", "backend_connected": False}
        return json_response(body, status=503, sort_keys=False)

    async def status(request: Request) -> Response:
        body = await request.app.state.service.status.body()
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-cache"})

    def console_file(name: str) -> Response:
        return Response(
            console_files[name], media_type=_CONSOLE_MEDIA_TYPES[name], headers=_CONSOLE_HEADERS
        )

    async def console(request: Request) -> Response:
        return console_file("index.html")

    async def favicon(request: Request) -> Response:
        # Browsers ask for it on every page of the origin: a 404 each time is log noise.
        return Response(favicon_ico, media_type="image/x-icon", headers=_CONSOLE_HEADERS)

    async def console_asset(request: Request) -> Response:
        name: str = request.path_params["file"]
        if name not in console_files:
            return Response(status_code=404)
        return console_file(name)

    # Synchronous handlers touch the filesystem, so Starlette runs them in its thread pool.
    def home(request: Request) -> Response:
        # Read per request so operators can edit the page without a restart.
        try:
            page = (static_root / "index.html").read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return HTMLResponse(fallback_home)
        except OSError as exc:
            log_event("landing_page.read.failed", f"index.html unreadable: {exc}", logging.WARNING)
            return HTMLResponse(fallback_home)
        return HTMLResponse(_filled(page, values))

    def static(request: Request) -> Response:
        relative: str = request.path_params["path"]
        parts = [part for part in relative.split("/") if part]
        if "\x00" in relative or _hidden(parts):
            return Response(status_code=404)
        target = static_root.joinpath(*parts).resolve()
        # Symlinks may point anywhere; only what resolves inside the root is served.
        if not target.is_relative_to(static_root):
            return Response(status_code=404)
        if target.is_file():
            return FileResponse(target)
        if target.is_dir():
            return _directory_listing(target, request.url.path, at_root=not parts)
        return Response(status_code=404)

    return [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/", home, methods=["GET"]),
        Route("/console", console, methods=["GET"]),
        Route("/console/{file}", console_asset, methods=["GET"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/static/{path:path}", static, methods=["GET"]),
    ]

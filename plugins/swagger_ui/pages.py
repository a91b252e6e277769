"""The Swagger UI routes: ``swagger_ui.html`` instead of the bundle's demo page, then the
bundle's files by name."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute, Route

__all__ = ["routes"]

# The bundle's own index.html and initializer load the petstore demo; ours replaces them.
_EXCLUDED = frozenset({"index.html", "index.j2", "swagger-initializer.js"})


def routes() -> list[BaseRoute]:
    """``/swagger-ui/`` and ``/swagger-ui/{file}``; the bundle is looked up once, here."""
    here = files("aviso_builtins.swagger_ui")
    page = here.joinpath("swagger_ui.html").read_text(encoding="utf-8")
    missing = here.joinpath("no_swagger_ui.html").read_text(encoding="utf-8")
    assets = _assets()

    async def swagger_ui(request: Request) -> Response:
        if assets is None:
            return HTMLResponse(missing, status_code=404)
        return HTMLResponse(page)

    async def swagger_asset(request: Request) -> Response:
        name: str = request.path_params["file"]
        if assets is None:
            return HTMLResponse(missing, status_code=404)
        if name == "index.html":
            return HTMLResponse(page)
        asset = assets.get(name)
        return FileResponse(asset) if asset is not None else Response(status_code=404)

    return [
        Route("/swagger-ui/", swagger_ui, methods=["GET"]),
        Route("/swagger-ui/{file}", swagger_asset, methods=["GET"]),
    ]


def _assets() -> dict[str, Path] | None:
    """Swagger UI's files by name (``None``: the ``docs`` extra is not installed)."""
    try:
        import swagger_ui_bundle  # type: ignore[import-untyped]  # ships no type hints
    except ImportError:
        return None
    folder = Path(str(swagger_ui_bundle.swagger_ui_path))
    return {
        asset.name: asset
        for asset in folder.iterdir()
        if asset.is_file() and asset.name not in _EXCLUDED
    }

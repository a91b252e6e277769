"""Swagger UI at ``/swagger-ui/``: the API browser over the server's own API description
(``/api-docs/openapi.json``). Its files come with the ``docs`` extra; without it both routes
answer 404 with a page that names the extra."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aviso_plugins import hookimpl

if TYPE_CHECKING:
    # Only the routes import Starlette: discovering plugins (``aviso-server --help``) does not.
    from starlette.routing import BaseRoute

__all__ = ["aviso_extra_routes"]


@hookimpl
def aviso_extra_routes() -> list[BaseRoute]:
    from aviso_builtins.swagger_ui.pages import routes

    return routes()

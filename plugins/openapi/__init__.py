"""The API description: the OpenAPI 3.1 document at ``/api-docs/openapi.json``, built once
per app from the host's own routes (described here) and every plugin's (hook
``aviso_openapi``). Blocked (``AVISO_BLOCK_PLUGINS=openapi``), the server serves everything
else, the document's path answers 404, and no plugin's ``aviso_openapi`` is called."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aviso_plugins import hookimpl

if TYPE_CHECKING:
    # Only the route imports Starlette and the description: discovering plugins
    # (``aviso-server --help``) does not.
    from starlette.routing import BaseRoute

    from aviso_plugins.service import ServiceAccess

__all__ = ["aviso_extra_routes"]


@hookimpl
def aviso_extra_routes(service: ServiceAccess) -> list[BaseRoute]:
    from aviso_builtins.openapi.document import routes

    return routes(service)

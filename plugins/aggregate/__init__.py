"""The aggregate watch, ``POST /api/v1/aggregate``: counts of the notifications a watch
selects, grouped by identifier fields, as a snapshot once history is counted and then as
updates at most once per debounce window (docs/aggregate.md).

Served through the public plugin API: a summary stream (``ServiceAccess.summary_stream``)
whose summary is the group counts. Its limits stay in the host's ``limits`` section
(``max_aggregate_groups``, ``min_aggregate_debounce_ms``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aviso_plugins import hookimpl
from aviso_plugins.service import ServiceAccess

if TYPE_CHECKING:
    # Only a served app imports Starlette, the routes and their description: discovering
    # plugins does not.
    from starlette.routing import BaseRoute

    from aviso_plugins.openapi import OpenApiContext, OpenApiContribution


@hookimpl
def aviso_api_routes(service: ServiceAccess) -> list[BaseRoute]:
    from aviso_builtins.aggregate.routes import AggregateRoute

    return [AggregateRoute(service).route()]


@hookimpl
def aviso_openapi(service: ServiceAccess, context: OpenApiContext) -> OpenApiContribution:
    from aviso_builtins.aggregate.openapi import contribution

    return contribution(service, context, service.section("limits")["min_aggregate_debounce_ms"])

"""What the API description reads from the running service
(:meth:`aviso_plugins.service.ServiceAccess.openapi_sources`); the built-in plugin ``openapi``
writes and serves the document."""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING

from aviso_host.errors import Endpoint
from aviso_host.plugins import PluginError
from aviso_host.service import server_version
from aviso_plugins.openapi import (
    EndpointErrors,
    EventTypeSchema,
    OpenApiContext,
    OpenApiContribution,
    OpenApiSources,
)
from aviso_plugins.service import ServiceAccess

if TYPE_CHECKING:
    from aviso_host.service import Service


def openapi_sources(service: Service, access: ServiceAccess) -> OpenApiSources:
    """``service``'s sources; the plugins' hooks are called with ``access``."""
    schemas = service.catalog.schemas
    return OpenApiSources(
        version=server_version(),
        event_schemas={
            name: EventTypeSchema(name, schemas[name].fields, schemas[name].describe())
            for name in sorted(schemas)
        },
        strict=service.catalog.strict,
        limits=dataclasses.asdict(service.settings.limits),
        endpoints=tuple(
            EndpointErrors(endpoint.name.lower(), endpoint.label, endpoint.validation_code)
            for endpoint in Endpoint
        ),
        contributions=lambda context: _contributions(service, access, context),
    )


def _contributions(
    service: Service, access: ServiceAccess, context: OpenApiContext
) -> list[tuple[str, OpenApiContribution]]:
    """Each plugin's ``aviso_openapi`` part with its plugin's name; a hook that raises, or
    returns anything but a contribution or ``None``, fails startup naming its plugin."""
    manager = service.registry.manager
    if manager is None:
        return []
    found: list[tuple[str, OpenApiContribution]] = []
    for impl in manager.hook.aviso_openapi.get_hookimpls():
        # Each plugin gets a context of its own: the document's operations share its
        # examples and schemas, and one plugin's edits must reach neither them nor the next.
        arguments = {"service": access, "context": copy.deepcopy(context)}
        try:
            result = impl.function(*(arguments[name] for name in impl.argnames))
        except Exception as exc:
            raise PluginError(
                f"plugin '{impl.plugin_name}': aviso_openapi() raised {type(exc).__name__}: {exc}"
            ) from exc
        if result is None:
            continue
        if not isinstance(result, OpenApiContribution):
            raise PluginError(
                f"plugin '{impl.plugin_name}': aviso_openapi() returned {result!r}, "
                "not an OpenApiContribution"
            )
        found.append((impl.plugin_name, result))
    return found

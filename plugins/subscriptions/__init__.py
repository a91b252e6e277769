"""Named subscriptions whose cursor the server keeps: ``/api/v1/subscriptions``, pulled over
Server-Sent Events or pushed through the delivery kinds plugins provide
(``aviso_delivery_kinds``).

Each service gets its own store (in the backend's shared state: process-local on
``in_memory``, a JetStream key-value bucket on ``jetstream``) and delivery runner; a backend
that keeps no shared state serves no subscription routes. ``subscriptions.enabled: false``
turns the routes and the deliveries off.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from aviso_plugins import hookimpl
from aviso_plugins.service import ServiceAccess, log_event

if TYPE_CHECKING:
    # Only a served app imports Starlette and the routes: discovering plugins does not.
    from starlette.routing import BaseRoute

    from aviso_builtins.subscriptions.routes import SubscriptionRoutes
    from aviso_plugins.openapi import OpenApiContext, OpenApiContribution
    from aviso_plugins.process import SettingsSection

BUCKET = "subscriptions"
"""The shared-state bucket the subscriptions are kept in."""

_served: WeakKeyDictionary[ServiceAccess, SubscriptionRoutes | None] = WeakKeyDictionary()


def served(service: ServiceAccess) -> SubscriptionRoutes | None:
    """The subscriptions of ``service`` (``None`` when it serves none), made at first ask."""
    if service not in _served:
        _served[service] = _build(service)
    return _served[service]


def _build(service: ServiceAccess) -> SubscriptionRoutes | None:
    from aviso_builtins.subscriptions.settings import subscription_settings

    if not subscription_settings(service).enabled or not service.keeps_shared_state:
        return None
    from aviso_builtins.subscriptions.deliveries import DeliveryRunner
    from aviso_builtins.subscriptions.metrics import SubscriptionCollector
    from aviso_builtins.subscriptions.routes import SubscriptionRoutes
    from aviso_builtins.subscriptions.store import SubscriptionStore
    from aviso_plugins.state import DeferredState

    store = SubscriptionStore(DeferredState(partial(service.backend.shared_state, BUCKET)))
    runner = DeliveryRunner(service)
    service.metrics_registry.register(SubscriptionCollector(runner.census, runner.kinds))
    return SubscriptionRoutes(service, store, runner)


@hookimpl
def aviso_settings_sections() -> list[SettingsSection]:
    from aviso_builtins.subscriptions.settings import SECTION

    return [SECTION]


@hookimpl
def aviso_api_routes(service: ServiceAccess) -> list[BaseRoute]:
    subscriptions = served(service)
    return [] if subscriptions is None else subscriptions.routes()


@hookimpl
def aviso_openapi(service: ServiceAccess, context: OpenApiContext) -> OpenApiContribution | None:
    if served(service) is None:
        return None
    from aviso_builtins.subscriptions.openapi import contribution
    from aviso_builtins.subscriptions.routes import ENDPOINT
    from aviso_builtins.subscriptions.settings import subscription_settings

    settings = dataclasses.asdict(subscription_settings(service))
    return contribution(service, context, ENDPOINT, settings)


@hookimpl
async def aviso_startup(service: ServiceAccess) -> None:
    from aviso_builtins.subscriptions.settings import subscription_settings

    subscriptions = served(service)
    if subscriptions is None:
        if subscription_settings(service).enabled:
            kind = service.backend_kind
            log_event(
                "subscriptions.unavailable",
                f"subscriptions need a backend that keeps shared state; '{kind}' "
                "keeps none: their routes are not served",
            )
        return
    leases = await service.leases()
    await subscriptions.runner.start(subscriptions.store, leases, subscriptions.admit_entry)


@hookimpl
async def aviso_shutdown(service: ServiceAccess) -> None:
    subscriptions = _served.get(service)
    if subscriptions is not None:
        await subscriptions.runner.close()

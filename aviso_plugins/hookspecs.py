"""Every hook a plugin can implement.

Each hook is collected from all registered plugins (none is ``firstresult``): the host
merges the results and refuses duplicates, so two plugins can never silently claim the
same handler type, backend kind, auth mode, authoriser or sink name. A test fails when a
hook here lacks a docstring or a section in ``docs/plugins.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import click

from aviso_plugins import hookspec
from aviso_plugins.openapi import OpenApiContext, OpenApiContribution
from aviso_plugins.process import LogSetup, SettingsSection
from aviso_plugins.schema_keys import SchemaKey
from aviso_plugins.types import (
    AuthProvider,
    DeliveryKind,
    FieldHandler,
    NotificationConsumer,
    SharedResources,
    Sink,
    StorageBackend,
    StreamAuthoriser,
)

if TYPE_CHECKING:
    # Annotations only: discovering plugins (`aviso-server --help`) imports this module,
    # and Starlette is not needed to answer it.
    from prometheus_client.registry import Collector
    from starlette.routing import BaseRoute

    from aviso_plugins.service import ServiceAccess

__all__ = [
    "aviso_api_routes",
    "aviso_auth_providers",
    "aviso_backend_shared_resources",
    "aviso_commands",
    "aviso_delivery_kinds",
    "aviso_extra_routes",
    "aviso_field_handlers",
    "aviso_log_handlers",
    "aviso_metrics",
    "aviso_notification_consumers",
    "aviso_openapi",
    "aviso_schema_keys",
    "aviso_settings_sections",
    "aviso_shutdown",
    "aviso_sinks",
    "aviso_startup",
    "aviso_storage_backends",
    "aviso_stream_authorisers",
]

# -- identifiers -------------------------------------------------------------------------


@hookspec
def aviso_field_handlers() -> Iterable[type[FieldHandler]]:
    """Return field handler classes; each is selected by its ``type_name`` in a schema."""


@hookspec
def aviso_schema_keys() -> Iterable[type[SchemaKey]]:
    """Return schema key classes; each claims the key of its ``key`` in every
    ``notification_schema`` entry (``completion``), validates its value and may derive event
    types from it (see ``SchemaKey``). A key the host reads (``topic``, ``identifier``, ...)
    or another plugin claims fails startup.
    """


# -- storage -----------------------------------------------------------------------------


@hookspec
def aviso_storage_backends() -> Iterable[type[StorageBackend]]:
    """Return storage backend classes; one is selected by ``notification_backend.kind``.

    A backend with a connection to lose overrides ``StorageBackend.ready()`` so that
    ``GET /ready`` reports it (the default says ready)."""


@hookspec
def aviso_backend_shared_resources(kind: str, options: Mapping[str, Any]) -> SharedResources | None:
    """Return what the backend of ``kind`` shares between worker processes, or ``None``.

    Called once by ``aviso-server serve``, in the process that supervises the workers (the
    only process with one worker), before any worker starts, with the selected
    ``notification_backend.kind`` and its section ``options`` (as ``BackendContext.options`` gives
    it to the backend: validated, defaults filled in). A plugin answers ``None`` for a
    kind it does not provide. The host starts what is returned, applies the option overrides
    ``SharedResources.start`` returns to every worker's configuration, and stops it after the
    last worker exited.
    """


# -- authentication and authorisation -----------------------------------------------------


@hookspec
def aviso_auth_providers() -> Iterable[type[AuthProvider]]:
    """Return auth provider classes; one is selected by ``auth.mode`` when auth is enabled."""


@hookspec
def aviso_stream_authorisers() -> Iterable[type[StreamAuthoriser]]:
    """Return stream authoriser classes; a stream opts in by naming one in ``auth.plugins``.

    A class declaring ``options_schema`` claims the top-level configuration section of its
    ``name``; the host validates it, fills in its defaults and runs ``check_configuration``.
    """


# -- producers ---------------------------------------------------------------------------


@hookspec
def aviso_sinks() -> Iterable[type[Sink]]:
    """Return sink classes that publish notifications on behalf of producers (e.g. Spark)."""


# -- consumers of stored notifications ----------------------------------------------------


@hookspec
def aviso_notification_consumers() -> Iterable[type[NotificationConsumer]]:
    """Return notification consumer classes; each is selected by its ``name``.

    The host constructs every consumer in each process with a ``ConsumerContext`` (through
    which it may publish notifications itself and keep state of its own), runs it in one
    process of the deployment at a time (the holder of its lease: ``start`` and ``close``
    mark when this process is the one), and feeds it the stored notifications of its event
    types from the position the host keeps under its ``name``, in sequence order per event
    type, a page at a time (``consume_page``; by default ``consume`` per notification: see
    ``NotificationConsumer``). Positions live in the backend's shared state:
    process-local on ``in_memory``, a JetStream key-value bucket on ``jetstream``. A shared
    backend that keeps no shared state refuses a registered consumer at startup.
    """


@hookspec
def aviso_delivery_kinds() -> Iterable[type[DeliveryKind]]:
    """Return delivery kind classes; one is selected by a subscription's ``delivery.kind``.

    A subscription without ``delivery`` is pulled over Server-Sent Events. For one with a
    ``delivery`` the host checks it against the kind's ``delivery_schema``, calls ``prepare``
    when the subscription is created, then ``deliver`` for each matching notification, in
    sequence order and one at a time per subscription, retrying after each of
    ``retry_delays`` and dead-lettering after the last (see ``DeliveryKind``). Two plugins
    cannot provide one ``kind``.
    """


# -- the web application -----------------------------------------------------------------


@hookspec
def aviso_extra_routes(service: ServiceAccess) -> Iterable[BaseRoute]:
    """Return extra Starlette routes to serve beside the aviso API (never under ``/api/v1``).

    Called once per app, when it is built, after ``aviso_api_routes``; ``service`` (the
    running service, as ``aviso_api_routes`` gets it) is optional: a page that needs nothing
    of the service leaves it out of its signature.
    """


@hookspec
def aviso_api_routes(service: ServiceAccess) -> Iterable[BaseRoute]:
    """Return Starlette routes to serve under ``/api/v1``, beside the host's.

    Called once per app, when it is built, with the service it serves (the same ``service``
    its ``aviso_startup`` and ``aviso_shutdown`` get); return none to serve none. Wrap each
    endpoint with ``service.api_endpoint`` (``service.stream_endpoint`` for an event stream),
    so that it answers as the API does: authenticated by the auth middleware, refusals
    (:class:`~aviso_plugins.service.ApiRefusal`) as the aviso error object. A path the
    host or another plugin serves fails startup. ``service.event_stream`` and
    ``service.summary_stream`` answer with a watch's event stream: its notifications, or a
    :class:`~aviso_plugins.service.Summary` of the plugin's own in their place.
    """


@hookspec
def aviso_openapi(service: ServiceAccess, context: OpenApiContext) -> OpenApiContribution | None:
    """Describe the routes the plugin serves under ``/api/v1`` in the OpenAPI document: return
    an :class:`~aviso_plugins.openapi.OpenApiContribution` (paths, component schemas, tags,
    error codes), or ``None`` to describe none.

    Called once per app by the built-in plugin ``openapi``, which writes and serves the
    document (never, when it is blocked), when the document is built (after
    ``aviso_api_routes``, with the same ``service``), with the parts of the host's document a
    description reuses (:class:`~aviso_plugins.openapi.OpenApiContext`: request examples,
    component schemas, the description and event schemas of a watch's stream). Each
    contribution is merged after the host's parts, then the ``limits.*`` settings its text
    names are stated with their configured values; a plugin states its own sections'
    settings itself (:func:`~aviso_plugins.openapi.settings_stated`). A path, component schema
    or tag that the host or another plugin describes fails startup, as does an exception
    raised here.
    """


# -- the service's lifetime --------------------------------------------------------------


@hookspec
def aviso_startup(service: ServiceAccess) -> Awaitable[None] | None:
    """Start what the plugin runs for the service's lifetime (a task, a connection).

    Called once per service, in each worker process, after the backend, the auth provider
    and the notification consumers started and before the first request is served; an
    awaitable returned is awaited (on the serving event loop) before the next plugin's.
    Raising fails the startup: every plugin's ``aviso_shutdown`` is called.
    """


@hookspec
def aviso_shutdown(service: ServiceAccess) -> Awaitable[None] | None:
    """Stop what ``aviso_startup`` started; an awaitable returned is awaited.

    Called once, when the service closes (after its streams were closed), in the reverse
    order of ``aviso_startup``, before the notification consumers and the backend stop; also
    when another plugin's ``aviso_startup`` failed, so a startup that never ran must be
    accepted. A failure is logged and the next plugin shut down.
    """


# -- the server process ------------------------------------------------------------------


@hookspec
def aviso_settings_sections() -> Iterable[SettingsSection]:
    """Return the configuration sections the plugin owns outside its plugin kind's own
    (``logging.otlp``: the built-in OTLP export's), each a :class:`SettingsSection`.

    Called once, when plugins are discovered. The host validates each section, whether
    written or not, wherever the configuration is read (``serve``, each worker,
    ``config check``), and runs its ``check``. A path the host declares (``logging.level``)
    or another plugin claims fails startup.
    """


@hookspec
def aviso_log_handlers(setup: LogSetup) -> Iterable[logging.Handler]:
    """Return ``logging.Handler`` objects that also receive every log record of the process
    (none: return an empty list), e.g. to export them.

    Called once per server process (``serve`` and each of its workers), after logging is
    configured and before the app is built, with the validated configuration and the host's
    JSON line formatter (:class:`~aviso_plugins.process.LogSetup`). The host adds each
    handler to the root logger; when the process stops serving it removes it and calls its
    ``close()``, which must return within a few seconds (flush what leaves in time, drop
    the rest). A handler must never block the thread that logs.
    """


@hookspec
def aviso_metrics() -> Iterable[Collector]:
    """Return Prometheus collectors (``prometheus_client`` metrics created with
    ``registry=None``, or custom collectors) to serve on ``/metrics`` beside the host's.

    Called once per service, when its metrics are set up: each collector is registered in
    that service's registry. Return the same process-wide objects on every call (several
    services may share a process); under ``serve --workers`` counters are summed over the
    workers. A metric name the host or another plugin registers fails startup.
    """


# -- the command line --------------------------------------------------------------------


@hookspec
def aviso_commands() -> Iterable[click.Command]:
    """Return click commands (or groups) to add to ``aviso-server`` under their own names.

    Called whenever ``aviso-server`` starts, including for ``serve``: keep the module that
    implements this import-light and import heavy dependencies inside the command function.
    A name used by the host (``serve``, ``plugins``, ``config``) or by another plugin (``plugin``:
    the built-in starter's) fails startup.
    """

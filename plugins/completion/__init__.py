"""Completion events: one notification when a group of notifications is complete, one
when its deadline passes first (the ``completion`` key of a ``notification_schema`` entry)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aviso_builtins.completion.consumer import CompletionConsumer
from aviso_builtins.completion.rule import CompletionKey
from aviso_plugins import hookimpl
from aviso_plugins.consumers import NotificationConsumer
from aviso_plugins.schema_keys import SchemaKey

if TYPE_CHECKING:
    # Only the routes import Starlette: discovering plugins (``aviso-server --help``) does not.
    from starlette.routing import BaseRoute

__all__ = ["aviso_extra_routes", "aviso_notification_consumers", "aviso_schema_keys"]


@hookimpl
def aviso_schema_keys() -> list[type[SchemaKey]]:
    return [CompletionKey]


@hookimpl
def aviso_notification_consumers() -> list[type[NotificationConsumer]]:
    return [CompletionConsumer]


@hookimpl
def aviso_extra_routes() -> list[BaseRoute]:
    from aviso_builtins.completion.page import routes

    return routes()

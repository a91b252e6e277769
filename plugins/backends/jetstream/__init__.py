"""The ``jetstream`` storage backend plugin (durable history, cluster-wide fan-out)."""

from collections.abc import Mapping
from typing import Any

from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_builtins.backends.jetstream.embedded import SharedNatsServer
from aviso_builtins.backends.jetstream.options import parse_options
from aviso_plugins import hookimpl
from aviso_plugins.types import SharedResources, StorageBackend


@hookimpl
def aviso_storage_backends() -> list[type[StorageBackend]]:
    return [JetStreamBackend]


@hookimpl
def aviso_backend_shared_resources(kind: str, options: Mapping[str, Any]) -> SharedResources | None:
    """The embedded nats-server (``embedded_store_dir``), one for every worker."""
    if kind != JetStreamBackend.kind or not options.get("embedded_store_dir"):
        return None
    return SharedNatsServer(parse_options(options))

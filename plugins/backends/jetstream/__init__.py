"""The ``jetstream`` storage backend plugin (durable history, cluster-wide fan-out)."""

from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_plugins import hookimpl
from aviso_plugins.types import StorageBackend


@hookimpl
def aviso_storage_backends() -> list[type[StorageBackend]]:
    return [JetStreamBackend]

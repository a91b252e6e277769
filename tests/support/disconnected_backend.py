"""A third-party backend whose (imaginary) connection is down.

An in-memory subclass registered through a real plugin, so ``/ready`` and ``/status`` read
readiness through ``StorageBackend.ready()`` as they would for any external store.
"""

from __future__ import annotations

from typing import ClassVar

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins import hookimpl
from aviso_plugins.types import StorageBackend


class DisconnectedBackend(InMemoryBackend):
    """Serves like the in-memory backend but says its connection is down."""

    kind: ClassVar[str] = "disconnected"

    async def ready(self) -> bool:
        return False


class DisconnectedPlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [DisconnectedBackend]

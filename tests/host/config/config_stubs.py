"""Small plugin stand-ins so configuration tests need neither entry points nor real plugins."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_builtins.auth.ecpds import EcpdsAuthoriser
from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_builtins.backends.jetstream.options import OPTIONS_SCHEMA as JETSTREAM_OPTIONS_SCHEMA
from aviso_host.plugins import PluginRegistry
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    AuthProvider,
    BackendCapabilities,
    Batch,
    Caller,
    FieldHandler,
    LiveSink,
    StartCursor,
    StorageBackend,
    StoredNotification,
    Subscription,
)


class _Handler(FieldHandler):
    def canonicalise(self, text: str) -> str:
        return text


class StringStub(_Handler):
    type_name = "StringHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "max_length": {"type": "integer", "minimum": 0}
    }


class IntStub(_Handler):
    type_name = "IntHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
    }

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        low, high = definition.get("range", (0, 0))
        if low > high:
            raise ValueError(f"range minimum {low} exceeds maximum {high}")


class EnumStub(_Handler):
    type_name = "EnumHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "values": {"type": "array", "items": {"type": "string"}}
    }
    required_options = frozenset({"values"})


class DateStub(_Handler):
    type_name = "DateHandler"
    options: ClassVar[Mapping[str, Mapping[str, Any]]] = {"canonical_format": {"type": "string"}}

    def __init__(self, field: str, definition: Mapping[str, Any]) -> None:
        super().__init__(field, definition)
        if definition.get("canonical_format", "%Y%m%d") not in ("%Y%m%d", "%Y-%m-%d"):
            raise ValueError("unsupported canonical_format")


class _Backend(StorageBackend):
    """Never instantiated: configuration only reads the class attributes."""

    async def publish(
        self, topic: str, payload: str, metadata: Mapping[str, str]
    ) -> StoredNotification:
        raise NotImplementedError

    async def fetch_batch(self, pattern: TopicPattern, start: StartCursor, limit: int) -> Batch:
        raise NotImplementedError

    async def subscribe(self, pattern: TopicPattern, sink: LiveSink) -> Subscription:
        raise NotImplementedError

    async def wipe_stream(self, name: str) -> None:
        raise NotImplementedError

    async def wipe_all(self) -> None:
        raise NotImplementedError

    async def delete_message(self, stream: str, sequence: int) -> bool:
        raise NotImplementedError


_COUNT = {"type": "integer", "minimum": 0}


class InMemoryStub(_Backend):
    kind = "in_memory"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {
            "max_history_per_topic": _COUNT,
            "max_topics": _COUNT,
            "enable_metrics": {"type": "boolean"},
        },
    }

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        # The real plugin's own rules: the host runs them for the selected backend only.
        InMemoryBackend.check_options(options)


class JetStreamStub(_Backend):
    kind = "jetstream"
    capabilities = BackendCapabilities(True, True, True, True, True)
    options_schema: ClassVar[Mapping[str, Any]] = JETSTREAM_OPTIONS_SCHEMA


class _AuthStub(AuthProvider):
    async def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        raise NotImplementedError


class DirectStub(_AuthStub):
    mode: ClassVar[str] = "direct"


class TrustedProxyStub(_AuthStub):
    mode: ClassVar[str] = "trusted_proxy"


def make_registry(with_auth_plugins: bool = True) -> PluginRegistry:
    """Stub plugins for every kind; ``with_auth_plugins=False`` leaves auth uninstalled."""
    handlers: list[type[FieldHandler]] = [StringStub, IntStub, EnumStub, DateStub]
    auth: dict[str, type[AuthProvider]] = {"direct": DirectStub, "trusted_proxy": TrustedProxyStub}
    return PluginRegistry(
        field_handlers={handler.type_name: handler for handler in handlers},
        backends={"in_memory": InMemoryStub, "jetstream": JetStreamStub},
        auth_providers=auth if with_auth_plugins else {},
        # The real one: its section's schema and rules are what the ECPDS tests here check.
        authorisers={"ecpds": EcpdsAuthoriser} if with_auth_plugins else {},
    )


_BASE: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 8000},
    "notification_backend": {"kind": "in_memory"},
}

RIVER_GAUGE: dict[str, Any] = {
    "topic": {"base": "gauge", "key_order": ["basin", "station"]},
    "identifier": {
        "basin": {"type": "EnumHandler", "values": ["Danube", "Rhine"], "required": True},
        "station": {"type": "StringHandler", "max_length": 8, "required": True},
        "level_band": {"type": "IntHandler", "range": [0, 9], "required": False},
        "obs_date": {"type": "DateHandler", "required": False},
    },
}

AUTH_ENABLED: dict[str, Any] = {
    "enabled": True,
    "mode": "direct",
    "auth_o_tron_url": "http://auth.example:8080",
    "jwt_secret": "s3cret",
    "admin_roles": {"ops": ["admin"]},
}


def document(**sections: Any) -> dict[str, Any]:
    """A minimal valid document with ``sections`` replacing or adding top-level keys."""
    return {**copy.deepcopy(_BASE), **copy.deepcopy(sections)}


def with_schema(**schema_overrides: Any) -> dict[str, Any]:
    """A document with one ``river_gauge`` schema, top-level keys of the schema replaced."""
    schema = {**copy.deepcopy(RIVER_GAUGE), **copy.deepcopy(schema_overrides)}
    return document(notification_schema={"river_gauge": schema})

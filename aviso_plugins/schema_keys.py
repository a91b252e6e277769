"""Schema keys: a key a plugin adds to the entries of ``notification_schema`` (say,
``completion``), validated by the plugin, which may derive event types of its own from it.

The host checks the key's value against :attr:`SchemaKey.options_schema` with the rest of
the configuration, then calls :meth:`SchemaKey.derived_schemas` once per event type that
has the key. The event types it returns join ``notification_schema`` as if they had been
written there: validated, listed by ``GET /api/v1/schema``, watched, replayed and published
like any other. A plugin reads its key's values where its other parts run (a notification
consumer's :attr:`~aviso_plugins.consumers.ConsumerContext.schemas`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from aviso_plugins.fields import FieldHandler

__all__ = ["RESERVED_SCHEMA_KEYS", "SchemaKey"]

RESERVED_SCHEMA_KEYS = frozenset(
    {
        "topic",
        "endpoint",
        "identifier",
        "payload",
        "auth",
        "storage_policy",
        "max_historical_notifications",
    }
)
"""The keys the host reads in a ``notification_schema`` entry: no plugin may claim one."""


class SchemaKey(ABC):
    """One key of ``notification_schema.<event type>``, provided by the
    ``aviso_schema_keys`` hook. Constructed once per configuration check with the field
    handler classes of every plugin, by ``type_name``, so that a key can check a value
    against the handler of the field it names (:attr:`field_handlers`).
    """

    key: ClassVar[str]
    """The key's name, e.g. ``"completion"``; two plugins cannot claim one name."""

    options_schema: ClassVar[Mapping[str, Any]] = {"type": "object"}
    """JSON Schema of the key's value, checked before :meth:`derived_schemas` sees it."""

    def __init__(self, field_handlers: Mapping[str, type[FieldHandler]] | None = None) -> None:
        self.field_handlers: Mapping[str, type[FieldHandler]] = field_handlers or {}
        """Field handler classes by ``type_name`` (an identifier field's ``type``)."""

    @abstractmethod
    def derived_schemas(
        self, event_type: str, schema: Mapping[str, Any], value: Any
    ) -> Mapping[str, Mapping[str, Any]]:
        """Check ``value`` (the key's value in the entry ``schema`` of ``event_type``, already
        shape-checked) against the rest of the entry, and return the event types it adds:
        name -> an entry as ``notification_schema`` takes it (``{}`` for none).

        Raise :class:`~aviso_plugins.auth.ConfigurationProblem` for a rule the value
        breaks, its ``path`` relative to the key (``("member",)``): the host stops with one
        line naming the whole key (``notification_schema.ens.completion.member: ...``).
        """

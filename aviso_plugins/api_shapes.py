"""JSON bodies the host's routes answer with, each declared once: the route builds it
(type-checked against the declaration) and the API description (the built-in plugin
``openapi``) shows the schema derived from it (:func:`aviso_plugins.shapes.shape_schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field

# pydantic reads a TypedDict's declaration only from typing_extensions' before Python 3.12.
from typing_extensions import TypedDict

from aviso_plugins.shapes import reference, shape

__all__ = [
    "IDENTIFIER_RULE",
    "AdminNotificationResult",
    "AdminResult",
    "Count",
    "Health",
    "PayloadRule",
    "Readiness",
    "RequestId",
    "SchemaCatalogue",
    "SchemaDetail",
    "SchemaEntry",
    "SchemaNotFound",
    "Status",
    "StatusBackend",
    "StatusNotifications",
]

RequestId = Annotated[str, reference("#/components/schemas/RequestId")]
"""The request's id, as the ``X-Request-ID`` response header carries it."""
Count = Annotated[int, Field(ge=0)]
IDENTIFIER_RULE = "#/components/schemas/IdentifierRule"
"""What each field handler's ``describe()`` answers (its parameters are the handler's own)."""


@shape(closed=True)
class Health(TypedDict):
    status: Literal["ok"]


@shape(closed=True)
class Readiness(TypedDict):
    status: Literal["ready", "not_ready"]
    backend_connected: bool


@shape(closed=True)
class StatusBackend(TypedDict):
    kind: str
    """`notification_backend.kind`."""
    ready: bool
    """As `GET /ready` says."""


@shape(closed=True)
class StatusNotifications(TypedDict):
    """Notifications stored through this server process."""

    last_minute: Count
    per_second: Annotated[float, Field(ge=0)]
    """Average over the last minute."""
    total: Count
    """Since start."""


@shape(closed=True)
class Status(TypedDict):
    backend: StatusBackend
    notifications: StatusNotifications
    status: Literal["ok"]
    version: str


@shape(closed=True)
class AdminResult(TypedDict):
    success: bool
    message: str
    request_id: RequestId


@shape(closed=True)
class AdminNotificationResult(TypedDict):
    success: bool
    message: str
    notification_id: str
    """The raw path value."""
    request_id: RequestId


@shape()
class PayloadRule(TypedDict):
    required: bool


@shape(closed=True)
class SchemaEntry(TypedDict):
    """One event type's schema as the schema routes show it."""

    identifier: dict[str, Annotated[dict[str, Any], reference(IDENTIFIER_RULE)]]
    payload: PayloadRule | None
    """`null` when the schema has no payload block."""


@shape(closed=True)
class SchemaCatalogue(TypedDict):
    event_types: list[str]
    schema: dict[str, Annotated[SchemaEntry, reference("#/components/schemas/SchemaEntry")]]
    status: Literal["success"]
    total_schemas: Count
    message: NotRequired[str]
    """Only when no schema is configured at all."""


@shape(closed=True)
class SchemaDetail(TypedDict):
    event_type: str
    schema: Annotated[SchemaEntry, reference("#/components/schemas/SchemaEntry")]
    status: Literal["success"]


@shape(closed=True)
class SchemaNotFound(TypedDict):
    available_types: NotRequired[list[str]]
    message: str
    request_id: RequestId
    status: Literal["error"]

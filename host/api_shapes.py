"""JSON bodies the routes answer with, each declared once: the route builds it (type-checked
against the declaration) and the API description shows the schema derived from it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

# pydantic reads a TypedDict's declaration only from typing_extensions' before Python 3.12.
from typing_extensions import TypedDict

from aviso_plugins.shapes import reference, shape

RequestId = Annotated[str, reference("#/components/schemas/RequestId")]
"""The request's id, as the ``X-Request-ID`` response header carries it."""
Count = Annotated[int, Field(ge=0)]


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

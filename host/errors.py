"""The aviso error object: codes, labels, JSON bodies and the log event each one emits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aviso_host.config.unknown_keys import nearest
from aviso_host.encoding import dumps, dumps_texts
from aviso_host.logs import echoed, masked
from aviso_plugins.service import ApiRefusal
from aviso_plugins.service import log_failure as log_failure


class Endpoint(Enum):
    """The POST endpoints; each has its own error label and validation code."""

    NOTIFY = ("notify", "Invalid Notification Request", "INVALID_NOTIFICATION_REQUEST")
    WATCH = ("watch", "Invalid Watch Request", "INVALID_WATCH_REQUEST")
    REPLAY = ("replay", "Invalid Replay Request", "INVALID_REPLAY_REQUEST")
    AGGREGATE = ("aggregate", "Invalid Aggregate Request", "INVALID_AGGREGATE_REQUEST")
    # A subscription's filter is a watch's, validated (and worded) as a watch's.
    SUBSCRIPTION = ("watch", "Invalid Subscription Request", "INVALID_SUBSCRIPTION_REQUEST")

    def __init__(self, operation: str, label: str, validation_code: str) -> None:
        self.operation = operation
        self.label = label
        self.validation_code = validation_code


class ApiError(ApiRefusal):
    """A failure answered with the aviso error object (keys sorted on the wire)."""

    logged = False
    """Set by internal_failure, which has logged the failure already."""

    @classmethod
    def of(cls, refusal: ApiRefusal) -> ApiError:
        """A plugin's refusal, as the host answers it."""
        if isinstance(refusal, ApiError):
            return refusal
        error = cls(
            refusal.status,
            refusal.code,
            refusal.error,
            refusal.message,
            details=refusal.details,
            extra=refusal.extra,
            with_details=refusal.with_details,
            event_name=refusal.event_name,
            headers=refusal.headers,
        )
        error.__cause__ = refusal
        return error

    def body(self, request_id: str) -> dict[str, Any]:
        """The error object; configured secrets in its texts are masked as in the log, and
        each text is cut to ``TEXT_LIMIT`` characters."""
        body: dict[str, Any] = {
            "code": self.code,
            "error": self.error,
            "message": self.message,
            "request_id": request_id,
            **self.extra,
        }
        if self.with_details:
            body["details"] = self.details
        return {
            name: _shown(value) if isinstance(value, str) else value for name, value in body.items()
        }


TEXT_LIMIT = 1_024
"""Backstop for one text member of an error object: messages that repeat client input cut
it to ``ECHO_LIMIT`` characters themselves, and whatever a message repeats, no answer is
huge."""


def _shown(text: str) -> str:
    return masked(echoed(text, TEXT_LIMIT))


def parse_error(endpoint: Endpoint, code: str, message: str) -> ApiError:
    return ApiError(400, code, endpoint.label, message, event_name="api.request.parse.failed")


def validation_error(endpoint: Endpoint, message: str, details: str | None = None) -> ApiError:
    return ApiError(400, endpoint.validation_code, endpoint.label, message, details=details)


UNKNOWN_EVENT_TYPE_CODE = "UNKNOWN_EVENT_TYPE"


def unknown_event_type(event_type: str, configured: list[str]) -> ApiError:
    # The upstream message, then the configured event type it likely misspells.
    close = nearest(event_type, configured)
    hint = f" (did you mean '{close}'?)" if close is not None else ""
    return ApiError(
        400,
        UNKNOWN_EVENT_TYPE_CODE,
        "unknown_event_type",
        f"unknown event type '{echoed(event_type)}'{hint}",
        extra={"configured_event_types": configured},
        with_details=False,
    )


def processing_error(message: str, details: str | None = None) -> ApiError:
    return ApiError(
        500,
        "NOTIFICATION_PROCESSING_FAILED",
        "Notification Processing Failed",
        message,
        details=details,
        event_name="api.request.processing.failed",
    )


def storage_error(details: str | None = None) -> ApiError:
    return ApiError(
        500,
        "NOTIFICATION_STORAGE_FAILED",
        "Notification Storage Failed",
        "Failed to store notification",
        details=details,
        event_name="api.request.processing.failed",
    )


def stream_setup_error(details: str, topic: str) -> ApiError:
    return ApiError(
        500,
        "SSE_STREAM_INITIALIZATION_FAILED",
        "SSE stream creation failed",
        "Failed to create stream consumer",
        details=details,
        extra={"topic": topic},
        event_name="stream.sse.initialization.failed",
    )


def json_response(
    body: Mapping[str, Any],
    status: int = 200,
    *,
    sort_keys: bool = True,
    headers: Sequence[tuple[str, str]] = (),
) -> Response:
    """A JSON response with aviso's encoding (typed bodies pass ``sort_keys=False``).

    ``headers`` are appended as separate fields, so a name may appear more than once.
    """
    response = Response(
        dumps(body, sort_keys=sort_keys).encode(),
        status_code=status,
        media_type="application/json",
    )
    response.raw_headers.extend(
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers
    )
    return response


class JsonAnswer:
    """What :func:`json_response` answers for a typed body (keys in the order given),
    without Starlette's ``Response`` (its header building shows on the notify path)."""

    __slots__ = ("body", "headers", "status_code")

    def __init__(
        self,
        body: Mapping[str, Any] | bytes,
        status: int = 200,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        """``body``: the mapping, or its JSON already written."""
        self.body = body if isinstance(body, bytes) else dumps_texts(body)
        self.status_code = status
        self.headers = headers  # extra fields, lower-case names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [
            (b"content-length", str(len(self.body)).encode()),
            (b"content-type", b"application/json"),
            *self.headers,
        ]
        await send({"type": "http.response.start", "status": self.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


# -- Refusals at the HTTP edge (docs/guarantees.md, "Limits at the HTTP edge") ------------


def payload_too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        "PAYLOAD_TOO_LARGE",
        "Payload Too Large",
        f"Request body exceeds the limit of {limit} bytes",
        event_name="api.request.refused",
    )


def header_fields_too_large(limit: int) -> ApiError:
    return ApiError(
        431,
        "HEADER_FIELDS_TOO_LARGE",
        "Request Header Fields Too Large",
        f"Request head exceeds the limit of {limit} bytes",
        event_name="api.request.refused",
    )


def request_head_timeout(seconds: float) -> ApiError:
    return ApiError(
        408,
        "REQUEST_TIMEOUT",
        "Request Timeout",
        f"Request head not completed within {seconds:g} seconds",
        event_name="api.request.refused",
    )


def too_many_connections(retry_after: int) -> ApiError:
    return ApiError(
        503,
        "SERVICE_UNAVAILABLE",
        "service_unavailable",
        "Too many open connections; retry later",
        with_details=False,
        event_name="api.request.refused",
        headers=(("Retry-After", str(retry_after)),),
    )


def idempotency_key_reused(key: str) -> ApiError:
    """A notify re-using an ``Idempotency-Key`` of the duplicate window for another
    notification (the IETF Idempotency-Key draft's 422)."""
    return ApiError(
        422,
        "IDEMPOTENCY_KEY_REUSED",
        "Idempotency Key Reused",
        f"Idempotency-Key '{key}' was already used for a different notification",
        event_name="api.request.validation.failed",
    )


def idempotency_key_not_retained(key: str) -> ApiError:
    """A notify re-using an ``Idempotency-Key`` of the duplicate window whose notification
    is no longer stored: it cannot be confirmed as a re-send, and is not stored either."""
    return ApiError(
        422,
        "IDEMPOTENCY_KEY_NOT_RETAINED",
        "Idempotency Key Not Retained",
        f"The notification stored under Idempotency-Key '{key}' is no longer retained; "
        "nothing was stored (send a new notification with a new key)",
        event_name="api.request.validation.failed",
    )


def request_body_timeout(seconds: float) -> ApiError:
    return ApiError(
        408,
        "REQUEST_TIMEOUT",
        "Request Timeout",
        f"Request body not completed within {seconds:g} seconds",
        event_name="api.request.refused",
    )


def too_many_client_connections(limit: int, retry_after: int) -> ApiError:
    return ApiError(
        429,
        "TOO_MANY_REQUESTS",
        "Too Many Requests",
        f"More than {limit} open connections from this client address; retry later",
        event_name="api.request.refused",
        headers=(("Retry-After", str(retry_after)),),
    )


def malformed_request() -> ApiError:
    """A request the HTTP parser cannot read (request line, header fields or framing)."""
    return ApiError(
        400,
        "BAD_REQUEST",
        "Bad Request",
        "Malformed HTTP request",
        event_name="api.request.refused",
    )


def http_version_not_supported(version: str) -> ApiError:
    return ApiError(
        505,
        "HTTP_VERSION_NOT_SUPPORTED",
        "HTTP Version Not Supported",
        f"HTTP/{version} is not supported on this port; use HTTP/1.1",
        event_name="api.request.refused",
    )


def internal_error() -> ApiError:
    """What an unexpected failure answers: nothing about its cause reaches the client."""
    return ApiError(
        500,
        "INTERNAL_ERROR",
        "internal_error",
        "Internal server error",
        with_details=False,
        event_name="api.request.unhandled",
    )


def internal_failure(error: ApiError, exc: BaseException, **log_fields: Any) -> ApiError:
    """``error``, a 5xx whose texts are generic, once ``exc`` is logged (:func:`log_failure`):
    an exception's text, which may hold anything (a plugin's credentials, a library's
    internals), never reaches the client."""
    log_failure(error.event_name, error.message, exc, code=error.code, **log_fields)
    error.logged = True
    return error


def error_headers(error: ApiError, request_id: str, length: int) -> list[tuple[str, str]]:
    """Header fields of an error answered below the routes: the connection is not reused."""
    return [
        ("content-type", "application/json"),
        ("content-length", str(length)),
        ("x-request-id", request_id),
        ("connection", "close"),
        *error.headers,
    ]


async def send_error(error: ApiError, request_id: str, send: Send) -> None:
    """Answer ``error`` through an ASGI ``send`` (middleware and protocol, not routes)."""
    body = dumps(error.body(request_id)).encode()
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in error_headers(error, request_id, len(body))
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})

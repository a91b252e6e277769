"""Reading the shared POST body of notify / watch / replay / aggregate (steps 2-5 of the
pipeline)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect, Request

from aviso_host.config.settings import LimitSettings
from aviso_host.encoding import loads
from aviso_host.errors import ApiError, Endpoint, parse_error
from aviso_host.logs import echoed
from aviso_plugins._shared.json_depth import exceeds_json_depth

DEFAULT_MAX_DEPTH = LimitSettings().max_json_depth
ALLOWED_FIELDS = ("event_type", "identifier", "from_id", "from_date", "to_id", "to_date", "payload")
_ALLOWED_SET = frozenset(ALLOWED_FIELDS)


class BodyTooLarge(Exception):
    """Raised by the body-limit middleware's ``receive`` once a body passes
    ``limits.max_body_bytes``; that middleware answers it (413 ``PAYLOAD_TOO_LARGE``)."""


# Not frozen: a frozen dataclass sets each of its nine fields through object.__setattr__,
# which costs a notify more than reading the rest of its body. Nothing changes it.
@dataclass(slots=True)
class RequestBody:
    event_type: str
    identifier: dict[str, Any]
    from_id: str | None
    from_date: str | None
    payload: Any
    """``None`` when absent or JSON null (the two are the same thing)."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """The endpoint's own members beyond the shared ones, as sent (absent or null left out);
    the endpoint checks their types."""
    to_id: str | None = None
    to_date: str | None = None
    """The replay end point; other endpoints refuse it with their own validation error."""


async def read_body(request: Request) -> bytes:
    """The whole body; its size is bounded by the body-limit middleware, which raises
    :class:`BodyTooLarge` from inside this loop as soon as the limit is passed.

    ``Request.stream()`` read straight from ``receive``: its async generator costs more
    than the rest of the read of a one-message body.
    """
    receive = request.receive
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        elif message["type"] == "http.disconnect":
            raise ClientDisconnect


def _reason(exc: ValueError) -> str:
    """Why a body is not JSON, in aviso's words: the parser's and the codec's own messages
    are not shown to clients (:func:`aviso_host.encoding.loads` words the rest itself)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"the body is not valid UTF-8 (byte {exc.start})"
    return echoed(str(exc))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{echoed(value)}"'
    if isinstance(value, list):
        return "sequence"
    return "map"


def missing_field(endpoint: Endpoint, name: str) -> ApiError:
    return parse_error(
        endpoint, "INVALID_REQUEST_SHAPE", f"Request deserialization failed: missing field `{name}`"
    )


def invalid_type(endpoint: Endpoint, value: Any, expected: str) -> ApiError:
    """``INVALID_REQUEST_SHAPE`` for a member of the wrong JSON type."""
    return parse_error(
        endpoint,
        "INVALID_REQUEST_SHAPE",
        f"Request deserialization failed: invalid type: {_describe(value)}, expected {expected}",
    )


def parse_body(
    raw: bytes,
    endpoint: Endpoint,
    extra_fields: tuple[str, ...] = (),
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> RequestBody:
    """``extra_fields``: top-level members this endpoint allows beyond the shared ones;
    ``max_depth``: ``limits.max_json_depth``."""
    if exceeds_json_depth(raw, max_depth):
        raise parse_error(
            endpoint,
            "INVALID_JSON",
            f"JSON parsing failed: nesting deeper than the limit of {max_depth} levels",
        )
    try:
        document = loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise parse_error(endpoint, "INVALID_JSON", f"JSON parsing failed: {_reason(exc)}") from exc
    if isinstance(document, dict) and not _ALLOWED_SET.issuperset(document):
        allowed = ALLOWED_FIELDS + extra_fields
        unknown = sorted(set(document) - set(allowed))
        if unknown:
            allowed_text = "[" + ", ".join(f'"{name}"' for name in allowed) + "]"
            raise parse_error(
                endpoint,
                "UNKNOWN_FIELD",
                "Request contains unknown fields: "
                f"Unknown field '{echoed(unknown[0])}' in request. Allowed fields: {allowed_text}",
            )
    return _shape(document, endpoint, extra_fields)


def _shape(document: Any, endpoint: Endpoint, extra_fields: tuple[str, ...]) -> RequestBody:
    if not isinstance(document, dict):
        raise invalid_type(endpoint, document, "struct RequestBody")
    for name in ("event_type", "identifier"):
        if name not in document:
            raise missing_field(endpoint, name)
    if not isinstance(document["event_type"], str):
        raise invalid_type(endpoint, document["event_type"], "a string")
    if not isinstance(document["identifier"], dict):
        raise invalid_type(endpoint, document["identifier"], "a map")
    for name in ("from_id", "from_date", "to_id", "to_date"):
        value = document.get(name)
        if value is not None and not isinstance(value, str):
            raise invalid_type(endpoint, value, "a string")
    return RequestBody(
        event_type=document["event_type"],
        identifier=document["identifier"],
        from_id=document.get("from_id"),
        from_date=document.get("from_date"),
        payload=document.get("payload"),
        to_id=document.get("to_id"),
        to_date=document.get("to_date"),
        extras={name: document[name] for name in extra_fields if document.get(name) is not None}
        if extra_fields
        else {},
    )

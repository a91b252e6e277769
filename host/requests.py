"""Reading the shared POST body of notify / watch / replay (steps 2-5 of the pipeline)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from aviso_host.encoding import loads
from aviso_host.errors import ApiError, Endpoint, parse_error

MAX_BODY_BYTES = 262_144
ALLOWED_FIELDS = ("event_type", "identifier", "from_id", "from_date", "payload")
_ALLOWED_TEXT = "[" + ", ".join(f'"{name}"' for name in ALLOWED_FIELDS) + "]"
_JSON_TYPES = {str: "a string", bool: "a boolean", int: "integer", float: "floating point"}


class BodyTooLarge(Exception):
    """Answered by the framework-level 413 (not an aviso error object)."""


@dataclass(frozen=True, slots=True)
class RequestBody:
    event_type: str
    identifier: dict[str, Any]
    from_id: str | None
    from_date: str | None
    payload: Any
    """``None`` when absent or JSON null (the two are the same thing)."""


async def read_body(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


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
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    return "map"


def parse_body(raw: bytes, endpoint: Endpoint) -> RequestBody:
    try:
        document = loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise parse_error(endpoint, "INVALID_JSON", f"JSON parsing failed: {exc}") from exc
    if isinstance(document, dict):
        unknown = sorted(set(document) - set(ALLOWED_FIELDS))
        if unknown:
            raise parse_error(
                endpoint,
                "UNKNOWN_FIELD",
                "Request contains unknown fields: "
                f"Unknown field '{unknown[0]}' in request. Allowed fields: {_ALLOWED_TEXT}",
            )
    return _shape(document, endpoint)


def _shape(document: Any, endpoint: Endpoint) -> RequestBody:
    def fail(detail: str) -> ApiError:
        return parse_error(
            endpoint, "INVALID_REQUEST_SHAPE", f"Request deserialization failed: {detail}"
        )

    if not isinstance(document, dict):
        raise fail(f"invalid type: {_describe(document)}, expected struct RequestBody")
    for name in ("event_type", "identifier"):
        if name not in document:
            raise fail(f"missing field `{name}`")
    if not isinstance(document["event_type"], str):
        raise fail(f"invalid type: {_describe(document['event_type'])}, expected a string")
    if not isinstance(document["identifier"], dict):
        raise fail(f"invalid type: {_describe(document['identifier'])}, expected a map")
    for name in ("from_id", "from_date"):
        value = document.get(name)
        if value is not None and not isinstance(value, str):
            raise fail(f"invalid type: {_describe(value)}, expected a string")
    return RequestBody(
        event_type=document["event_type"],
        identifier=document["identifier"],
        from_id=document.get("from_id"),
        from_date=document.get("from_date"),
        payload=document.get("payload"),
    )

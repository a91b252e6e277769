"""POST /api/v1/notification."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from aviso_host.auth.policy import check_stream_policy
from aviso_host.clients import client_of
from aviso_host.cursors import now_whole_seconds
from aviso_host.encoding import dumps
from aviso_host.errors import (
    Endpoint,
    JsonAnswer,
    idempotency_key_not_retained,
    idempotency_key_reused,
    internal_failure,
    processing_error,
    storage_error,
    validation_error,
)
from aviso_host.identifiers import plan_checked_notification
from aviso_host.logs import log_event, logger
from aviso_host.metrics import count_notification_as, counted_notification
from aviso_host.routes.common import (
    api_endpoint,
    caller_of,
    error_response,
    read_request,
    request_id_of,
    schema_for,
    service_of,
)
from aviso_host.routes.streams import end_point_refused
from aviso_host.schemas import POINT
from aviso_plugins.types import (
    ACTOR_METADATA,
    MESSAGE_ID_METADATA,
    Caller,
    InvalidValue,
    MessageIdNotRetained,
    MessageIdRefused,
    Writer,
)

IDEMPOTENCY_HEADER = "Idempotency-Key"
_IDEMPOTENCY_FIELD = IDEMPOTENCY_HEADER.lower().encode("latin-1")
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,128}")
REPLAYED_HEADER = "Idempotent-Replayed"
_REPLAYED = ((REPLAYED_HEADER.lower().encode("latin-1"), b"true"),)


def idempotency_key(scope: Scope) -> str | None:
    """The first ``Idempotency-Key`` field, as ``request.headers.get`` reads it, without
    building the request's header mapping."""
    for name, value in scope["headers"]:
        if name == _IDEMPOTENCY_FIELD:
            key: str = value.decode("latin-1")
            return key
    return None


def scoped_message_id(key: str, caller: Caller | None) -> str:
    """The message id an ``Idempotency-Key`` is stored under, on any backend: the key itself
    for an anonymous writer (all of them share one scope per stream), and for an
    authenticated one ``user `` and a digest of username and key. No key holds a space, so
    no writer can send another user's id, and two users' equal keys are two ids."""
    if caller is None:
        return key
    digest = hashlib.sha256()
    for part in (caller.username, key):
        data = part.encode()
        # Length-prefixed: no two (username, key) pairs hash the same text.
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return f"user {digest.hexdigest()}"


def writer_of(scope: Scope, caller: Caller | None) -> Writer:
    """Whose budget a notify's remembered ``Idempotency-Key`` is charged to: the
    authenticated caller, else the client (the peer, or the proxy before it: its address,
    an IPv6 one's /64 network, :func:`~aviso_host.clients.client_of`)."""
    if caller is not None:
        return Writer(username=caller.username)
    client = scope.get("client")
    return Writer(address=client_of(client[0]) if client else None)


def with_actor(metadata: Mapping[str, str], caller: Caller | None) -> dict[str, str]:
    """The stored metadata with the publisher set from the authenticated caller only.

    Any actor key already present is dropped first, so nothing a client sends can claim a
    publisher.
    """
    attributed = {key: value for key, value in metadata.items() if key != ACTOR_METADATA}
    if caller is not None:
        attributed[ACTOR_METADATA] = dumps(caller.username)
    return attributed


class NotifyRoute:
    """``POST /api/v1/notification`` as a plain ASGI app (a class, so Starlette's ``Route``
    does not wrap it): the per-request wrapping of ``request_response`` is skipped."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await notify(Request(scope, receive))
        await response(scope, receive, send)


@api_endpoint
@counted_notification
async def notify(request: Request) -> Response | JsonAnswer:
    service = service_of(request)
    body = await read_request(request, Endpoint.NOTIFY)
    schema = schema_for(service, body)
    count_notification_as(request, body.event_type)
    if POINT in body.identifier:
        raise validation_error(
            Endpoint.NOTIFY,
            "identifier.point is only supported for watch/replay endpoints, not /notification",
        )
    refused = end_point_refused(body, Endpoint.NOTIFY)
    if refused is not None:
        raise validation_error(Endpoint.NOTIFY, refused)
    caller = caller_of(request)
    check_stream_policy(service.auth, schema, caller, write=True)
    limits = service.settings.limits
    try:
        planned = plan_checked_notification(
            schema,
            body.event_type,
            body.identifier,
            body.payload,
            limits.max_identifier_value_bytes,
            limits.max_topic_bytes,
            limits.max_payload_bytes,
        )
    except InvalidValue as exc:
        error = validation_error(Endpoint.NOTIFY, exc.message, exc.details)
        return error_response(request, error, event_type=body.event_type)
    except Exception as exc:  # a field handler that crashed
        error = internal_failure(
            processing_error("Failed to process notification"), exc, event_type=body.event_type
        )
        return error_response(request, error, event_type=body.event_type)
    metadata = with_actor(planned.metadata, caller)
    message_id = idempotency_key(request.scope)
    if message_id is not None:
        if not _IDEMPOTENCY_KEY.fullmatch(message_id):
            raise validation_error(
                Endpoint.NOTIFY,
                f"{IDEMPOTENCY_HEADER} header must be 1 to 128 printable ASCII characters",
            )
        # Stored as the message id: a backend that de-duplicates (within its duplicate
        # window) keeps the first notification sent with a key and drops re-sends.
        metadata = {**metadata, MESSAGE_ID_METADATA: scoped_message_id(message_id, caller)}
    try:
        record = await service.backend.publish_from(
            writer_of(request.scope, caller), planned.topic, planned.payload, metadata
        )
    except MessageIdRefused as exc:
        # Named by the client's key, never the scoped id the backend saw.
        key = exc.message_id if message_id is None else message_id
        answer = (
            idempotency_key_not_retained(key)
            if isinstance(exc, MessageIdNotRetained)
            else idempotency_key_reused(key)
        )
        return error_response(request, answer, event_type=body.event_type, topic=planned.topic)
    except Exception as exc:
        error = internal_failure(
            storage_error(), exc, event_type=body.event_type, topic=planned.topic
        )
        return error_response(request, error)
    service.notification_rate.record()
    if logger.isEnabledFor(logging.DEBUG):  # the line's fields are not built for nothing
        log_event(
            "api.notification.stored",
            "notification stored",
            logging.DEBUG,
            event_type=body.event_type,
            topic=planned.topic,
            sequence=record.sequence,
        )
    return JsonAnswer(
        {
            "status": "success",
            "request_id": request_id_of(request),
            "processed_at": now_whole_seconds(),
        },
        # A re-send: nothing new was stored, the same notification already was.
        headers=_REPLAYED if record.replayed else (),
    )

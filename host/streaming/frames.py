"""Every SSE event aviso emits, rendered to its exact wire bytes.

An event is three LF-terminated lines: ``event: <name>``, ``data: <compact JSON>`` and a
blank line. No ``id:``, ``retry:`` or comment lines, ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from aviso_host.cursors import now_whole_seconds, whole_seconds
from aviso_host.encoding import dumps

LIVE = b"live-notification"
REPLAY = b"replay"
REPLAY_CONTROL = b"replay-control"
HEARTBEAT = b"heartbeat"
ERROR = b"error"
CLOSING = b"connection-closing"
SKIPPED = b"notifications-skipped"

CLOSE_MESSAGES = {
    "end_of_stream": "Stream completed",
    "max_duration_reached": "Connection reached maximum duration",
    "server_shutdown": "Server is shutting down gracefully",
}
CLOSE_CAUSES = {
    "slow_consumer": "Client did not keep up; reconnect with from_id to resume",
    "auth_expired": "Authentication expired",
    "access_revoked": "Access to this stream was revoked",
}
"""Our own reasons to end a stream. On the wire they are ``reason: end_of_stream`` with the
precise ``cause``: ECMWF's client (pyaviso) treats any other reason as a fatal protocol error,
while on ``end_of_stream`` it reconnects from its cursor, which is right for all three (a
slow consumer resumes, an expired token is refreshed on the 401, a revoked one meets 403)."""


def frame(event: bytes, data: bytes) -> bytes:
    return b"event: " + event + b"\ndata: " + data + b"\n\n"


def http_chunk(data: bytes) -> bytes:
    """``data`` framed as one chunk of a chunked HTTP/1.1 body, byte for byte what uvicorn
    writes for a body message (what a stream writes without its task must not differ)."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


def frame_with_id(event: bytes, data: bytes, sequence: int) -> bytes:
    """A notification frame carrying ``id: <sequence>``: what an ``EventSource`` sends back as
    ``Last-Event-ID`` when it reconnects (subscription streams only)."""
    return b"event: " + event + b"\nid: " + str(sequence).encode() + b"\ndata: " + data + b"\n\n"


def _control(event: bytes, body: dict[str, Any]) -> bytes:
    return frame(event, dumps(body).encode())


def connection_established(topic: str, close_in_seconds: int, request_id: str) -> bytes:
    return _control(
        LIVE,
        {
            "type": "connection_established",
            "topic": topic,
            "timestamp": now_whole_seconds(),
            "connection_will_close_in_seconds": close_in_seconds,
            "request_id": request_id,
        },
    )


def replay_started(
    topic: str,
    from_sequence: int | None,
    from_date: datetime | None,
    batch_size: int,
    request_id: str,
    end_sequence: int | None = None,
) -> bytes:
    """``end_sequence``: the replay's resolved end point, ``None`` (JSON null) without one."""
    return _control(
        REPLAY_CONTROL,
        {
            "type": "replay_started",
            "topic": topic,
            "from_sequence": from_sequence,
            "from_date": whole_seconds(from_date) if from_date else None,
            "batch_size": batch_size,
            "timestamp": now_whole_seconds(),
            "request_id": request_id,
            "end_sequence": end_sequence,
        },
    )


def replay_completed(topic: str) -> bytes:
    return _control(
        REPLAY_CONTROL,
        {"type": "replay_completed", "topic": topic, "timestamp": now_whole_seconds()},
    )


def replay_limit_reached(topic: str, max_allowed: int) -> bytes:
    return _control(
        REPLAY_CONTROL,
        {
            "type": "notification_replay_limit_reached",
            "topic": topic,
            "max_allowed": max_allowed,
            "message": f"Historical replay limited to {max_allowed} messages. "
            "Additional historical messages may be available but were not retrieved.",
            "timestamp": now_whole_seconds(),
        },
    )


def heartbeat(topic: str) -> bytes:
    return _control(HEARTBEAT, {"timestamp": now_whole_seconds(), "topic": topic})


BATCH_FAILED_MESSAGE = "Failed to read notification history"


def batch_failed(topic: str, request_id: str, message: str = BATCH_FAILED_MESSAGE) -> bytes:
    return _control(
        ERROR,
        {
            "error": "stream_processing_failed",
            "message": message,
            "topic": topic,
            "request_id": request_id,
        },
    )


def limit_reached(
    topic: str, code: str, message: str, details: Mapping[str, Any], request_id: str
) -> bytes:
    """A summary stream's limit: ``code`` is also the ``connection-closing`` reason that
    follows (reconnecting would fail the same way, so it is none a client reconnects on)."""
    return _control(
        ERROR,
        {**details, "error": code, "message": message, "topic": topic, "request_id": request_id},
    )


def cloudevent_failed(topic: str, sequence: int, message: str, request_id: str) -> bytes:
    return _control(
        ERROR,
        {
            "error": "CloudEvent creation failed",
            "message": message,
            "topic": topic,
            "sequence": sequence,
            "request_id": request_id,
        },
    )


def connection_closing(
    topic: str,
    reason: str,
    request_id: str,
    resume_from_sequence: int | None = None,
    message: str | None = None,
) -> bytes:
    """``message``: the words of a reason of a plugin's own (a summary's limit)."""
    cause = reason if reason in CLOSE_CAUSES else None
    body: dict[str, Any] = {
        "reason": "end_of_stream" if cause else reason,
        "message": CLOSE_CAUSES[reason] if cause else message or CLOSE_MESSAGES[reason],
        "timestamp": now_whole_seconds(),
        "topic": topic,
        "request_id": request_id,
    }
    if cause:
        body["cause"] = cause
    if resume_from_sequence is not None:
        body["resume_from_sequence"] = resume_from_sequence
    return _control(CLOSING, body)


def history_gap(topic: str, requested: int, first_available: int) -> bytes:
    """Additive: history the client asked for is gone; it must re-sync (clients that do not
    know this ``type`` ignore it)."""
    return _control(
        REPLAY_CONTROL,
        {
            "type": "history_gap",
            "topic": topic,
            "requested_from_sequence": requested,
            "first_available_sequence": first_available,
            "timestamp": now_whole_seconds(),
        },
    )


def notifications_skipped(topic: str, count: int, first: int, last: int) -> bytes:
    """Additive: the ``drop`` backpressure policy skipped live notifications. An event name of
    its own: clients that do not know it ignore it, while every ``live-notification`` after
    the opening must be a CloudEvent for pyaviso."""
    return _control(
        SKIPPED,
        {
            "type": "notifications_skipped",
            "topic": topic,
            "skipped": count,
            "first_skipped_sequence": first,
            "last_skipped_sequence": last,
            "timestamp": now_whole_seconds(),
        },
    )

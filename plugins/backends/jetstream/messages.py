"""Between NATS messages and the host's stored notification records."""

from __future__ import annotations

import calendar
from collections.abc import Mapping

from nats.aio.msg import Msg

from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import StoredNotification


def to_record(msg: Msg) -> StoredNotification:
    metadata = msg.metadata
    stamp = metadata.timestamp  # microsecond precision, UTC
    time_ns = calendar.timegm(stamp.utctimetuple()) * 1_000_000_000 + stamp.microsecond * 1000
    headers: Mapping[str, str] = msg.headers or {}
    return StoredNotification(
        sequence=metadata.sequence.stream,
        topic=msg.subject,
        payload=msg.data.decode("utf-8", errors="replace"),
        time_ns=time_ns,
        metadata=dict(headers),
    )


def filter_subject(pattern: TopicPattern) -> str:
    """The server-side filter: a pattern's ``*`` tokens are NATS single-token wildcards,
    so the encoded pattern itself is an exact subject filter."""
    return pattern.encoded

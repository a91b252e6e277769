"""Between NATS messages and the host's stored notification records."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from nats.aio.msg import Msg
from nats.js.api import Header, RawStreamMsg

from aviso_plugins.topics import TopicPattern, encode_token
from aviso_plugins.types import StoredNotification


def to_record(msg: Msg) -> StoredNotification:
    metadata = msg.metadata
    headers: Mapping[str, str] = msg.headers or {}
    return StoredNotification(
        sequence=metadata.sequence.stream,
        topic=msg.subject,
        payload=msg.data.decode("utf-8", errors="replace"),
        time_ns=stored_time_ns(msg.reply),
        metadata=dict(headers),
    )


_HEADER_LINE = "NATS/1.0"
_EXPECTED_STREAM = Header.EXPECTED_STREAM.value


def read_stored(msg: RawStreamMsg) -> tuple[str, str, dict[str, str]] | None:
    """A message read by sequence (``get_msg``) as (topic, payload, metadata), the metadata
    as it was sent (:func:`~aviso_builtins.backends.jetstream.publisher.sent_metadata`);
    ``None`` when aviso cannot have written it (text that is not UTF-8, a header twice).

    The headers are read from the raw block the broker returned (``hdrs``, base64):
    nats-py's parsed ``headers`` turn a value that is not ASCII into an ``email`` header
    object, which would never compare equal to the text that was sent.
    """
    try:
        payload = (msg.data or b"").decode()
        block = base64.b64decode(msg.hdrs) if msg.hdrs else b""
        lines = block.decode().split("\r\n")
    except (UnicodeDecodeError, binascii.Error):
        return None
    metadata: dict[str, str] = {}
    if lines[0] and not lines[0].startswith(_HEADER_LINE):
        return None
    for line in lines[1:]:
        if not line:
            break
        name, colon, value = line.partition(":")
        if not colon or name in metadata:
            return None
        metadata[name] = value.strip()
    metadata.pop(_EXPECTED_STREAM, None)
    return msg.subject or "", payload, metadata


# JetStream's ack subject: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>
# (v1), or with <domain>.<account hash> after ACK and a trailing token (v2).
_V1_TOKENS = 9
_V1_TIME, _V2_TIME = 7, 9


def stored_time_ns(reply: str) -> int:
    """The broker's storage time in exact nanoseconds (nats-py's ``metadata.timestamp``
    rounds it to microseconds, which can move it past a client's ``from_date``)."""
    tokens = reply.split(".")
    return int(tokens[_V1_TIME if len(tokens) == _V1_TOKENS else _V2_TIME])


def filter_subject(pattern: TopicPattern) -> str:
    """The server-side filter, refined afterwards by ``pattern.matches``.

    Wildcards become NATS single-token wildcards, and so does any literal token that needed
    escaping, because a stored subject may spell an escape in lower case (``%2e``). Other
    literal tokens stay exact: every aviso writer (this one and the reference) escapes only
    ``. * > %`` (this one also space, tab, CR, LF) with upper-case hex, and a filter of
    wildcards only would make a selective replay read the whole stream. A foreign subject
    escaping a plain character (``%41`` for ``A``) is therefore not found by an exact-token
    replay (documented limitation).
    """
    return ".".join(
        "*" if token is None or "%" in (encoded := encode_token(token)) else encoded
        for token in pattern.tokens
    )

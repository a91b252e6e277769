"""Incremental Server-Sent Events parsing: what aviso's watch and replay streams are read with.

Used by the testing kit (:mod:`aviso_plugins.testing`), the Spark reader and the load tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Feed bytes in any split; complete events come out (the WHATWG event-stream rules).

    Lines end with LF, CRLF or a lone CR, even when a CRLF pair is split between two chunks.
    ``event``, ``data`` (several lines joined with LF), ``id`` and ``retry`` fields are read;
    comment lines (starting with a colon) and unknown fields are ignored; a blank line
    dispatches the event, unless it has no data. Lines are decoded only once complete, so a
    multi-byte UTF-8 character split between chunks is never cut.
    """

    __slots__ = ("_data", "_event", "_first", "_id", "_pending_cr", "_tail", "bytes_seen", "retry")

    def __init__(self) -> None:
        self._tail = b""
        self._pending_cr = False
        self._first = True
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.retry: int | None = None
        self.bytes_seen = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self.bytes_seen += len(chunk)
        if not chunk:
            return []
        if self._pending_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the LF of a CRLF whose CR ended the previous chunk
        self._pending_cr = chunk[-1:] == b"\r"
        data = self._tail + chunk
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._tail = lines.pop()
        events: list[SSEEvent] = []
        for raw in lines:
            if self._first:
                self._first = False
                if raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
            event = self._line(raw)
            if event is not None:
                events.append(event)
        return events

    @property
    def pending(self) -> bool:
        """Whether bytes of an unfinished line or event are held back."""
        return bool(self._tail or self._data or self._event)

    def _line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            return self._dispatch()
        if raw[:1] == b":":
            return None
        name, colon, value = raw.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\0" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry" and value.isdigit():
            self.retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        event, data = self._event, self._data
        self._event, self._data = "", []
        if not data:
            return None
        return SSEEvent(event or "message", "\n".join(data), self._id)

"""A strict SSE reader for tests: parses frames exactly as the wire contract defines them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

DEFAULT_TIMEOUT = httpx.Timeout(10.0, read=10.0)


@dataclass
class Event:
    name: str
    data: dict[str, Any]
    raw: str

    @property
    def kind(self) -> str:
        """The event name, plus ``/<data.type>`` for control events."""
        kind = self.data.get("type")
        if isinstance(kind, str) and not kind.startswith("int.ecmwf.aviso."):
            return f"{self.name}/{kind}"
        return self.name


@dataclass
class Stream:
    response: httpx.Response
    raw_text: list[str] = field(default_factory=list)

    def events(self) -> Iterator[Event]:
        """Yield events as they arrive; the raw text is kept for byte-level checks."""
        buffer = ""
        for chunk in self.response.iter_text():
            self.raw_text.append(chunk)
            buffer += chunk
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                lines = block.split("\n")
                assert len(lines) == 2, f"unexpected frame {block!r}"
                assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
                yield Event(lines[0][7:], json.loads(lines[1][6:]), block)
        assert buffer == "", f"trailing bytes {buffer!r}"


def post_json(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    return client.post(path, content=json.dumps(body))


def collect(
    client: httpx.Client, path: str, body: Any, until: str | None = None, limit: int = 10_000
) -> list[Event]:
    """Open a stream, read until an event of kind ``until`` (or the body ends), return all."""
    events: list[Event] = []
    with client.stream("POST", path, content=json.dumps(body), timeout=DEFAULT_TIMEOUT) as response:
        assert response.status_code == 200, response.read()
        for event in Stream(response).events():
            events.append(event)
            if (until is not None and event.kind == until) or len(events) >= limit:
                break
    return events

"""A blocking client of a server's replay API: every stored notification, in order.

The server caps one replay at ``max_historical_notifications`` and says so with a
``notification_replay_limit_reached`` control event; the client then asks again from the
sequence after the last one received, so a long history arrives whole, page by page.
Anything that would leave a gap (an HTTP error, an in-stream ``error`` event, a stream the
server shuts down) raises :class:`ReplayFailed` instead of returning a short history.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from aviso_plugins.sse import SSEParser

REPLAY_PATH = "/api/v1/replay"
SCHEMA_PATH = "/api/v1/schema/"
LIMIT_REACHED = "notification_replay_limit_reached"


class ReplayFailed(RuntimeError):
    """The server refused the replay or ended it before the history was complete."""


@dataclass(frozen=True)
class ReplayRequest:
    url: str
    event_type: str
    identifier: Mapping[str, str]
    from_id: str | None = None
    from_date: str | None = None
    authorization: str | None = None
    timeout_seconds: float = 60.0

    def body(self, from_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"event_type": self.event_type, "identifier": dict(self.identifier)}
        if from_id is not None:
            body["from_id"] = from_id
        else:
            body["from_date"] = self.from_date
        return body


def identifier_fields(url: str, event_type: str, timeout_seconds: float = 30.0) -> list[str]:
    """The identifier fields of ``event_type``, from the public schema endpoint."""
    response = httpx.get(url.rstrip("/") + SCHEMA_PATH + event_type, timeout=timeout_seconds)
    if response.status_code != 200:
        raise ReplayFailed(
            f"GET schema of '{event_type}': HTTP {response.status_code}: {response.text[:300]}"
        )
    return list(response.json()["schema"]["identifier"])


def replay(request: ReplayRequest) -> Iterator[dict[str, Any]]:
    """Yield the CloudEvents of ``request``'s history, ascending by sequence."""
    headers = {"Content-Type": "application/json"}
    if request.authorization:
        headers["Authorization"] = request.authorization
    from_id = request.from_id if request.from_id is not None or request.from_date else "1"
    with httpx.Client(
        base_url=request.url.rstrip("/"), headers=headers, timeout=request.timeout_seconds
    ) as client:
        while True:
            last: int | None = None
            limited = False
            for kind, data in _page(client, request.body(from_id)):
                if kind == "replay":
                    last = data["sequence"]
                    yield data
                elif kind == LIMIT_REACHED:
                    limited = True
            if not limited or last is None:
                return
            from_id = str(last + 1)


def _page(client: httpx.Client, body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """One replay stream's CloudEvents and control events as (``replay`` or the control
    type, data), checked to end cleanly."""
    with client.stream("POST", REPLAY_PATH, content=json.dumps(body)) as response:
        if response.status_code != 200:
            raise ReplayFailed(_error_text(response))
        parser = SSEParser()
        for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                data = json.loads(event.data)
                if event.event == "replay":
                    yield "replay", data
                elif event.event == "replay-control":
                    yield str(data.get("type")), data
                elif event.event == "error":
                    raise ReplayFailed(f"replay error: {data.get('error')}: {data.get('message')}")
                elif event.event == "connection-closing":
                    if data.get("reason") != "end_of_stream":
                        raise ReplayFailed(f"replay stream closed early: {data.get('message')}")
                    return
    raise ReplayFailed("replay stream ended without its closing event")


def _error_text(response: httpx.Response) -> str:
    text = response.read().decode("utf-8", "replace")
    try:
        error = json.loads(text)
    except ValueError:
        return f"replay refused: HTTP {response.status_code}: {text[:300]}"
    return (
        f"replay refused: HTTP {response.status_code} {error.get('code')}: {error.get('message')}"
    )

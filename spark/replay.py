"""A blocking client of a server's replay API: stored notifications in order, and the
sequence bounds a partitioned read is planned on.

The server caps one replay at ``max_historical_notifications`` and says so with a
``notification_replay_limit_reached`` control event; the client then asks again from the
sequence after the last one received, with the end the first page resolved (``to_id``), so
a long history arrives whole, page by page, and never past its end. Anything that would
leave a gap (an HTTP error, an in-stream ``error`` event, a stream the server shuts down)
raises :class:`ReplayFailed` instead of returning a short history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any

import httpx
import orjson

from aviso_plugins._shared.sse import SSEParser
from aviso_spark.fields import FieldSpec

REPLAY_PATH = "/api/v1/replay"
SCHEMA_PATH = "/api/v1/schema/"
LIMIT_REACHED = "notification_replay_limit_reached"
REPLAY_STARTED = "replay_started"
REPLAY_COMPLETED = "replay_completed"
HISTORY_GAP = "history_gap"
MAX_SEQUENCE = 2**64 - 1
"""The largest ``from_id`` / ``to_id`` the server accepts: "no end" as an explicit end."""


class ReplayFailed(RuntimeError):
    """The server refused the replay or ended it before the history was complete."""


@dataclass(frozen=True)
class ReplayRequest:
    url: str
    event_type: str
    identifier: Mapping[str, Any]
    """Field to scalar text or constraint object, as in the request body."""
    from_id: str | None = None
    from_date: str | None = None
    to_id: str | None = None
    to_date: str | None = None
    authorization: str | None = None
    timeout_seconds: float = 60.0

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"event_type": self.event_type, "identifier": dict(self.identifier)}
        if self.from_date is not None:
            body["from_date"] = self.from_date
        else:
            body["from_id"] = self.from_id or "1"
        if self.to_date is not None:
            body["to_date"] = self.to_date
        elif self.to_id is not None:
            body["to_id"] = self.to_id
        return body

    def between(self, first: int, last: int) -> ReplayRequest:
        """The same filter over sequences ``first`` .. ``last`` (inclusive)."""
        return replace(self, from_id=str(first), from_date=None, to_id=str(last), to_date=None)


@dataclass(frozen=True)
class Bounds:
    """Where a read's history lies: the first matching sequence (``None``: nothing matches)
    and the end the server resolved (``to_id`` / ``to_date``, else the last sequence stored
    when the request started)."""

    first: int | None
    end: int


def schema_fields(url: str, event_type: str, timeout_seconds: float = 30.0) -> dict[str, FieldSpec]:
    """The identifier fields of ``event_type``, from the public schema endpoint."""
    response = httpx.get(url.rstrip("/") + SCHEMA_PATH + event_type, timeout=timeout_seconds)
    if response.status_code != 200:
        raise ReplayFailed(
            f"GET schema of '{event_type}': HTTP {response.status_code}: {response.text[:300]}"
        )
    views = response.json()["schema"]["identifier"]
    return {name: FieldSpec.describe(name, view) for name, view in views.items()}


def _client(request: ReplayRequest) -> httpx.Client:
    headers = {"Content-Type": "application/json"}
    if request.authorization:
        headers["Authorization"] = request.authorization
    return httpx.Client(
        base_url=request.url.rstrip("/"), headers=headers, timeout=request.timeout_seconds
    )


def resolve_bounds(request: ReplayRequest) -> Bounds:
    """One replay, read only up to its first notification: the read's bounds.

    Without an end the request asks for ``to_id`` = the largest sequence, which the server
    resolves to the last one stored, so ``replay_started`` announces it.
    """
    if request.to_id is None and request.to_date is None:
        request = replace(request, to_id=str(MAX_SEQUENCE))
    end: int | None = None
    with _client(request) as client, closing(_page(client, request.body())) as events:
        for kind, data in events:
            if kind == REPLAY_STARTED:
                end = _end_sequence(data)
            elif kind == "replay":
                assert end is not None  # the opening comes first
                return Bounds(data["sequence"], end)
            elif kind in (REPLAY_COMPLETED, LIMIT_REACHED):
                break
    if end is None:
        raise ReplayFailed("the replay ended before its replay_started event")
    return Bounds(None, end)


def latest_sequence(request: ReplayRequest) -> int:
    """The last sequence stored in ``request``'s stream: an empty replay announcing it."""
    return stream_extent(request)[1]


def stream_extent(request: ReplayRequest) -> tuple[int, int]:
    """The first sequence retained in ``request``'s stream and its end (the last stored, or
    ``request``'s ``to_date`` resolved), from a replay that starts past the end: the server
    says where history begins (``history_gap``) and sends no notification."""
    probe = replace(request, from_id=str(MAX_SEQUENCE), from_date=None)
    if probe.to_date is None:
        probe = replace(probe, to_id=str(MAX_SEQUENCE))
    first = 1
    end: int | None = None
    with _client(probe) as client, closing(_page(client, probe.body())) as events:
        for kind, data in events:
            if kind == HISTORY_GAP and isinstance(data.get("first_available_sequence"), int):
                first = data["first_available_sequence"]
            elif kind == REPLAY_STARTED:
                end = _end_sequence(data)
            elif end is not None and kind in (REPLAY_COMPLETED, LIMIT_REACHED, "replay"):
                return first, end
    if end is not None:
        return first, end
    raise ReplayFailed("the replay ended before its replay_started event")


def first_sequences(request: ReplayRequest, count: int) -> list[int]:
    """The sequences of the first ``count`` notifications of ``request``'s history (fewer
    when it holds fewer); the stream is closed once they are read."""
    found: list[int] = []
    if count < 1:
        return found
    with closing(replay(request)) as events:
        for event in events:
            found.append(int(event["sequence"]))
            if len(found) >= count:
                break
    return found


def _end_sequence(started: dict[str, Any]) -> int:
    end = started.get("end_sequence")
    if not isinstance(end, int):
        raise ReplayFailed(
            f"the server announced no end_sequence ({end!r}): it does not support to_id"
        )
    return end


def replay(
    request: ReplayRequest,
    on_control: Callable[[str, dict[str, Any]], None] | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Yield the CloudEvents of ``request``'s history, ascending by sequence.

    ``on_control`` sees every replay-control event (``history_gap`` included) of every page.
    """
    with _client(request) as client:
        while True:
            last: int | None = None
            limited = False
            for kind, data in _page(client, request.body()):
                if kind == "replay":
                    last = data["sequence"]
                    yield data
                    continue
                if kind == LIMIT_REACHED:
                    limited = True
                elif kind == REPLAY_STARTED and isinstance(data.get("end_sequence"), int):
                    # Later pages keep the end this one resolved (a to_date, or H).
                    request = replace(request, to_id=str(data["end_sequence"]), to_date=None)
                if on_control is not None:
                    on_control(kind, data)
            if not limited or last is None:
                return
            request = replace(request, from_id=str(last + 1), from_date=None)


def _page(
    client: httpx.Client, body: dict[str, Any]
) -> Generator[tuple[str, dict[str, Any]], None, None]:
    """One replay stream's CloudEvents and control events as (``replay`` or the control
    type, data), checked to end cleanly."""
    with client.stream("POST", REPLAY_PATH, content=json.dumps(body)) as response:
        if response.status_code != 200:
            raise ReplayFailed(_error_text(response))
        parser = SSEParser()
        for chunk in response.iter_bytes():
            for event in parser.feed(chunk):
                data = orjson.loads(event.data)
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

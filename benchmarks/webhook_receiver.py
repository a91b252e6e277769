"""A webhook receiver for :mod:`benchmarks.webhook_delivery`: a raw ASGI app that answers
every POST with 204 and records when it arrived and the send time its body carries.

  python -m uvicorn benchmarks.webhook_receiver:app --port PORT

``GET /stats`` answers what was recorded (and keeps it); ``POST /reset`` forgets it. Under
``/flaky/`` every notification is answered 503 twice (by ``webhook-id``) before its 204, and
the time between attempts is recorded (``retry_gaps``: seconds, in attempt order).
A body's send time is ``data.payload.sent`` (a webhook's CloudEvent) or ``sent`` (the
baseline's own bodies), in seconds since the epoch.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

latencies: list[float] = []
arrivals: list[float] = []
paths: Counter[str] = Counter()
sample: bytes = b""
attempts: dict[tuple[str, str], list[float]] = {}
retry_gaps: list[list[float]] = []
FLAKY_FAILURES = 2


def _sent(body: bytes) -> float | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if "sent" in document:
        return float(document["sent"])
    payload = document.get("data", {}).get("payload")
    return float(payload["sent"]) if isinstance(payload, dict) and "sent" in payload else None


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _answer(send: Send, status: int, body: bytes = b"") -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    global sample
    if scope["type"] != "http":
        return
    body = await _body(receive)
    now = time.time()
    if scope["method"] == "GET" and scope["path"] == "/stats":
        stats = {
            "latencies": latencies,
            "arrivals": arrivals,
            "paths": dict(paths),
            "retry_gaps": retry_gaps,
        }
        await _answer(send, 200, json.dumps(stats).encode())
        return
    if scope["method"] == "GET" and scope["path"] == "/sample":
        await _answer(send, 200, sample)
        return
    if scope["method"] == "POST" and scope["path"] == "/reset":
        latencies.clear()
        arrivals.clear()
        paths.clear()
        attempts.clear()
        retry_gaps.clear()
        await _answer(send, 204)
        return
    if scope["path"].startswith("/flaky/"):
        webhook_id = dict(scope["headers"]).get(b"webhook-id", b"").decode()
        seen = attempts.setdefault((scope["path"], webhook_id), [])
        seen.append(now)
        if len(seen) <= FLAKY_FAILURES:
            await _answer(send, 503)
            return
        retry_gaps.append([later - earlier for earlier, later in itertools.pairwise(seen)])
    sent = _sent(body)
    if sent is not None:
        latencies.append(now - sent)
    arrivals.append(now)
    paths[scope["path"]] += 1
    if not sample and body.startswith(b"{"):
        sample = body
    await _answer(send, 204)

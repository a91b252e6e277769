"""``GET /completion``: a page that shows the open groups of every completion rule filling
up, and ``GET /completion/groups``, the JSON it reads (any worker answers: the groups are in
the consumer's shared state).

Groups of an event type whose schema requires auth (``auth.required: true``) are left out:
these routes sit outside the API's auth, and a group's values are identifier values.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from aviso_builtins.completion.consumer import CompletionConsumer, Group

__all__ = ["MAX_GROUPS_SHOWN", "routes"]

MAX_GROUPS_SHOWN = 200
"""Open groups one answer lists (the most recently started first)."""
FRESH_SECONDS = 1.0
"""How long one answer serves every caller (the page asks every two seconds)."""

_answers: weakref.WeakKeyDictionary[
    CompletionConsumer, tuple[float, asyncio.Future[dict[str, Any]]]
] = weakref.WeakKeyDictionary()


def _readable(consumer: CompletionConsumer) -> set[str]:
    schemas = consumer.context.schemas
    return {
        source
        for source in consumer.rules
        if not ((schemas.get(source) or {}).get("auth") or {}).get("required")
    }


async def groups(request: Request) -> Response:
    consumer = CompletionConsumer.running()
    if consumer is None:
        return JSONResponse({"rules": [], "groups": [], "hidden": []})
    return JSONResponse(await _answer(consumer))


async def _answer(consumer: CompletionConsumer) -> dict[str, Any]:
    """One answer for every caller of the last ``FRESH_SECONDS``: these routes are outside
    the API's auth, and on a process that is not the active one an answer costs a key
    listing and up to ``PAGE_READS`` reads of the shared state (of the backend every
    request shares), which a caller in a loop must not multiply."""
    now = time.monotonic()
    cached = _answers.get(consumer)
    if cached is None or now - cached[0] >= FRESH_SECONDS or _failed(cached[1]):
        cached = (now, asyncio.ensure_future(_read(consumer)))
        _answers[consumer] = cached
    # Shielded: a caller that goes away does not cancel the answer the others await.
    return await asyncio.shield(cached[1])


def _failed(answer: asyncio.Future[dict[str, Any]]) -> bool:
    return answer.done() and (answer.cancelled() or answer.exception() is not None)


async def _read(consumer: CompletionConsumer) -> dict[str, Any]:
    readable = _readable(consumer)
    rules = [
        {
            "event_type": source,
            "completion_event_type": rule.event_type,
            "group_by": list(rule.group_by),
            "member": rule.member,
            "expected": rule.expected_count,
            "deadline_seconds": rule.deadline_seconds,
        }
        for source, rule in sorted(consumer.rules.items())
        if source in readable
    ]
    shown: list[dict[str, Any]] = []
    for group in await consumer.open_groups(MAX_GROUPS_SHOWN, readable):
        shown.append(_view(consumer, group))
    hidden = sorted(set(consumer.rules) - readable)
    return {"rules": rules, "groups": shown, "hidden": hidden}


def _view(consumer: CompletionConsumer, group: Group) -> dict[str, Any]:
    rule = consumer.rules[group.source]
    return {
        "event_type": group.source,
        "values": group.values,
        "count": len(group.members),
        "expected": rule.expected_count,
        "missing": rule.missing(group.members),
        "first": group.first,
        "last": group.last,
        "deadline": group.deadline,
        "incomplete_published": group.incomplete,
    }


async def page(request: Request) -> Response:
    html = resources.files("aviso_builtins.completion").joinpath("completion.html").read_text()
    return HTMLResponse(html)


def routes() -> list[BaseRoute]:
    return [Route("/completion", page), Route("/completion/groups", groups)]

"""Option parsing and bounded fan-out shared by the built-in sinks."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from aviso_plugins.types import SinkOutcome, SinkUnavailable

T = TypeVar("T")


def int_option(options: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    """A whole-number option given as text (Spark options are strings)."""
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"sink option '{key}' must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"sink option '{key}' must be at least {minimum}, got {value}")
    return value


def backoff_seconds(base_ms: int, attempt: int) -> float:
    """Exponential backoff with jitter, so that many tasks retrying together spread out."""
    return base_ms * 2**attempt * random.uniform(0.5, 1.0) / 1000


async def publish_all(
    notifications: Sequence[T],
    concurrency: int,
    publish_one: Callable[[T], Awaitable[SinkOutcome]],
) -> list[SinkOutcome]:
    """Run ``publish_one`` for every notification with at most ``concurrency`` in flight.

    Generic in what a notification is, so that a benchmark can drive prepared raw messages
    through the very same fan-out as the sinks.

    The first :class:`SinkUnavailable` cancels the rest of the batch: the caller re-sends
    the whole batch anyway, so finishing the others would only add load on a failing peer.
    """
    semaphore = asyncio.Semaphore(concurrency)

    async def bounded(notification: T) -> SinkOutcome:
        async with semaphore:
            return await publish_one(notification)

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(bounded(item)) for item in notifications]
    except* SinkUnavailable as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]

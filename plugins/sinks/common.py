"""Option parsing and bounded fan-out shared by the built-in sinks."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar, cast

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
    return base_ms * 2.0**attempt * random.uniform(0.5, 1.0) / 1000


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
    # ``concurrency`` workers sharing one iterator of positions rather than a task and a
    # semaphore turn per notification: the fan-out's own CPU per publish drops from ~20 us
    # to ~6 us (measured with an instant publish), which a 500-row batch pays 500 times.
    outcomes: list[SinkOutcome | None] = [None] * len(notifications)
    positions = iter(range(len(notifications)))

    async def worker() -> None:
        for position in positions:
            outcomes[position] = await publish_one(notifications[position])

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, len(notifications))):
                group.create_task(worker())
    except* SinkUnavailable as failures:
        raise failures.exceptions[0] from None
    return cast(list[SinkOutcome], outcomes)  # every position was filled

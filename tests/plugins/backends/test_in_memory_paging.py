"""In-memory history paging: small pages over interleaved topics give exactly the matching,
retained records in sequence order (the per-page topic match cache must not change that)."""

from __future__ import annotations

import asyncio

import pytest

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import BackendContext, StartCursor, StoredNotification

TOPICS = ("gauge.rhine.3", "gauge.elbe.3", "gauge.rhine.4", "storm.rhine.3", "gauge.rhine")


async def _filled() -> tuple[InMemoryBackend, list[StoredNotification]]:
    backend = InMemoryBackend(BackendContext({"max_history_per_topic": 1000}, {}))
    records = [await backend.publish(TOPICS[n % len(TOPICS)], "null", {}) for n in range(200)]
    # Deleted records stay in the stream log until compaction; paging must skip them.
    for record in records[::7]:
        stream = record.topic.split(".", 1)[0]
        assert await backend.delete_message(stream, record.sequence)
    return backend, [record for index, record in enumerate(records) if index % 7]


async def _page_through(backend: InMemoryBackend, pattern: TopicPattern, limit: int) -> list[int]:
    sequences: list[int] = []
    cursor = StartCursor(from_sequence=1)
    while True:
        batch = await backend.fetch_batch(pattern, cursor, limit)
        sequences += [record.sequence for record in batch.messages]
        if not batch.has_more:
            return sequences
        assert batch.next_sequence is not None
        cursor = StartCursor(from_sequence=batch.next_sequence)


@pytest.mark.parametrize(
    "tokens",
    [
        ("gauge", "rhine", None),
        ("gauge", None, "3"),
        ("gauge", None, None),
        ("gauge", "rhine"),
        ("river", None, None),
    ],
)
@pytest.mark.parametrize("limit", [1, 3, 1000])
def test_pages_hold_exactly_the_matching_retained_records(
    tokens: tuple[str | None, ...], limit: int
) -> None:
    pattern = TopicPattern(tokens)

    async def scenario() -> tuple[list[int], list[int]]:
        backend, alive = await _filled()
        expected = [record.sequence for record in alive if pattern.matches(record.topic)]
        return await _page_through(backend, pattern, limit), expected

    paged, expected = asyncio.run(scenario())
    assert paged == expected

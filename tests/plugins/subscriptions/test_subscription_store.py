"""The subscription store over a process-local bucket: caps counted with compare-and-set,
and a count a killed process left too high corrected once it has not moved for a while."""

from __future__ import annotations

import asyncio
import time

from aviso_builtins.subscriptions.store import RECOUNT_SECONDS, SubscriptionEntry, SubscriptionStore
from aviso_plugins.state import ProcessLocalState


def entry(name: str) -> SubscriptionEntry:
    return SubscriptionEntry(None, name, {"event_type": "e"}, "2026-01-01T00:00:00Z", 1)


def test_caps_count_creates_and_deletes() -> None:
    async def scenario() -> None:
        store = SubscriptionStore(ProcessLocalState())
        first, second = entry("a"), entry("b")
        assert await store.add(first, 1, 10) == "created"
        assert await store.add(second, 1, 10) == "per_user"
        assert await store.add(entry("a"), 5, 10) == "exists"
        await store.remove(first)
        assert await store.add(second, 1, 10) == "created"
        assert await store.add(entry("c"), 5, 1) == "total"

    asyncio.run(scenario())


def test_a_full_count_left_by_a_killed_process_is_recounted_once_it_is_old() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()
        store = SubscriptionStore(state)
        # Counted, never stored: a create whose process was killed in between.
        await state.put("c.anon", f"1 {time.time()}".encode())
        assert await store.add(entry("a"), 1, 10) == "per_user"  # may be in progress
        await state.put("c.anon", f"1 {time.time() - RECOUNT_SECONDS - 1}".encode())
        assert await store.add(entry("a"), 1, 10) == "created"
        assert await store.add(entry("b"), 1, 10) == "per_user"

    asyncio.run(scenario())


def test_dead_letters_of_a_deleted_subscription_never_reach_one_created_under_its_name() -> None:
    def letter(document: dict[str, object]) -> None:
        document["letters"] = [{"sequence": 7}]

    async def scenario() -> None:
        store = SubscriptionStore(ProcessLocalState())
        old = entry("a")
        assert await store.add(old, 5, 10) == "created"
        await store.change_dead_letters(old, letter)
        assert (await store.dead_letters(old))[0]["letters"] == [{"sequence": 7}]
        await store.remove(old)
        new = entry("a")
        assert await store.add(new, 5, 10) == "created"
        # The old subscription's delivery ends after the delete: it dead-letters one more.
        await store.change_dead_letters(old, letter)
        assert (await store.dead_letters(new))[0]["letters"] == []

    asyncio.run(scenario())

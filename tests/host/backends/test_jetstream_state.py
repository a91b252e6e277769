"""Shared state on JetStream: key-value buckets on a real nats-server, seen alike by two
backends (two workers) connected to it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from aviso_builtins.backends.jetstream.backend import JetStreamBackend
from aviso_builtins.backends.jetstream.state import bucket_name
from aviso_plugins.leases import Lease, LeaseKeeper
from aviso_plugins.state import SharedState
from aviso_plugins.types import BackendContext
from tests.support.nats import NatsServer

T = TypeVar("T")


def two_workers(
    nats: NatsServer,
    scenario: Callable[[JetStreamBackend, JetStreamBackend], Awaitable[T]],
) -> T:
    async def run() -> T:
        first = JetStreamBackend(BackendContext({"nats_url": nats.url}, {}))
        second = JetStreamBackend(BackendContext({"nats_url": nats.url}, {}))
        await first.start()
        try:
            await second.start()
            try:
                return await scenario(first, second)
            finally:
                await second.shutdown()
        finally:
            await first.shutdown()

    return asyncio.run(run())


def fresh() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


async def bucket(backend: JetStreamBackend, name: str, ttl: float | None = None) -> SharedState:
    state = await backend.shared_state(name, ttl)
    assert state is not None
    return state


def test_two_workers_see_one_bucket_and_exactly_one_create_wins(module_nats: NatsServer) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        a, b = await bucket(first, name), await bucket(second, name)
        outcomes = await asyncio.gather(
            *(state.create("claim", str(index).encode()) for index, state in enumerate([a, b] * 5))
        )
        winners = [revision for revision in outcomes if revision is not None]
        assert len(winners) == 1
        seen_a, seen_b = await a.get("claim"), await b.get("claim")
        assert seen_a is not None and seen_a == seen_b and seen_a.revision == winners[0]

    two_workers(module_nats, scenario)


def test_update_compares_the_revision_across_workers(module_nats: NatsServer) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        a, b = await bucket(first, name), await bucket(second, name)
        created = await a.create("cursor", b"1")
        assert created is not None
        moved = await b.update("cursor", b"2", created)
        assert moved is not None and moved != created
        assert await a.update("cursor", b"stale", created) is None
        entry = await a.get("cursor")
        assert entry is not None and entry.value == b"2" and entry.revision == moved
        assert await a.update("absent", b"x", moved) is None
        assert await a.update("cursor", b"x", 0) is None

    two_workers(module_nats, scenario)


def test_delete_compares_the_revision_and_a_deleted_key_can_be_created_again(
    module_nats: NatsServer,
) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        a, b = await bucket(first, name), await bucket(second, name)
        created = await a.create("k", b"one")
        assert created is not None
        moved = await b.put("k", b"two")
        assert await a.delete("k", revision=created) is False
        assert (await a.get("k")) is not None
        assert await a.delete("k", revision=moved) is True
        assert await b.get("k") is None
        assert await b.delete("k") is False
        assert await b.update("k", b"x", moved) is None
        again = await b.create("k", b"three")
        assert again is not None
        assert await a.create("k", b"four") is None
        entry = await a.get("k")
        assert entry is not None and entry.value == b"three"
        assert await a.delete("k") is True

    two_workers(module_nats, scenario)


def test_keys_lists_a_prefix_sorted_without_deleted_keys(module_nats: NatsServer) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        a, b = await bucket(first, name), await bucket(second, name)
        assert await a.keys() == []
        for key in ("b.2", "a.1", "b.1", "c", "bb.1"):
            await a.put(key, b"")
        await b.delete("a.1")
        assert await b.keys("b.") == ["b.1", "b.2"]
        assert await b.keys("b") == ["b.1", "b.2", "bb.1"]
        assert await b.keys() == ["b.1", "b.2", "bb.1", "c"]
        assert await b.keys("z.") == []

    two_workers(module_nats, scenario)


def test_invalid_keys_and_bucket_names_are_value_errors(module_nats: NatsServer) -> None:
    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        state = await bucket(first, fresh())
        for key in ("a b", "a..b", "", "a*", "a>"):
            with pytest.raises(ValueError):
                await state.put(key, b"")
        with pytest.raises(ValueError):
            await first.shared_state("a.b")

    two_workers(module_nats, scenario)
    # Escaped so that no two shared-state names share a KV bucket.
    assert bucket_name("a_e") != bucket_name("a=")
    assert bucket_name("a=") == "aviso_a_e"


def test_with_a_ttl_an_entry_not_rewritten_expires_and_can_be_taken_again(
    module_nats: NatsServer,
) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        # Long enough for the second create to come inside it on a loaded machine.
        ttl = 5.0
        a, b = await bucket(first, name, ttl), await bucket(second, name, ttl)
        assert await a.create("lease", b"a") is not None
        assert await b.create("lease", b"b") is None
        deadline = time.monotonic() + 60
        while await b.get("lease") is not None:
            assert time.monotonic() < deadline, "the entry never expired"
            await asyncio.sleep(0.2)
        assert await b.create("lease", b"b") is not None

    two_workers(module_nats, scenario)


def test_wiping_every_stream_keeps_the_shared_state(module_nats: NatsServer) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        state = await bucket(first, name)
        await state.put("kept", b"1")
        await second.wipe_all()
        entry = await state.get("kept")
        assert entry is not None and entry.value == b"1"

    two_workers(module_nats, scenario)


def test_a_lease_whose_holder_stops_renewing_is_taken_over_by_another_worker(
    module_nats: NatsServer,
) -> None:
    name = fresh()

    async def scenario(first: JetStreamBackend, second: JetStreamBackend) -> None:
        dead = Lease(await bucket(first, name, 1.0), "work", "dead-worker", 1.0)
        assert await dead.acquire()  # and never renewed: its worker was killed
        taken = asyncio.Event()

        async def on_taken() -> None:
            taken.set()

        async def on_lost() -> None:
            pass

        keeper = LeaseKeeper(
            Lease(await bucket(second, name, 1.0), "work", "live-worker", 1.0), on_taken, on_lost
        )
        assert not await keeper.try_take()
        keeper.start()
        try:
            await asyncio.wait_for(taken.wait(), 30)
        finally:
            await keeper.stop()
        assert not await dead.renew()  # the dead holder, back, finds it lost

    two_workers(module_nats, scenario)

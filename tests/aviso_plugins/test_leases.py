"""Leases over a process-local TTL bucket (the JetStream ones: tests/host/backends)."""

from __future__ import annotations

import asyncio

import pytest

from aviso_plugins.leases import Lease, LeaseKeeper, LeaseLost, holder_id
from aviso_plugins.state import ProcessLocalState


def test_one_holder_at_a_time_and_a_release_frees_it_at_once() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)
        first = Lease(state, "work", "a", 60)
        second = Lease(state, "work", "b", 60)
        assert await first.acquire() and first.held
        assert not await second.acquire() and not second.held
        assert await first.renew()
        await first.release()
        assert not first.held
        assert await second.acquire()
        entry = await state.get("work")
        assert entry is not None and entry.value == b"b"

    asyncio.run(scenario())


def test_a_holder_notices_the_loss_at_its_next_renewal() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)
        first = Lease(state, "work", "a", 60)
        assert await first.acquire()
        await state.delete("work")  # as the TTL would after missed renewals
        assert await Lease(state, "work", "b", 60).acquire()
        assert not await first.renew()
        assert not first.held

    asyncio.run(scenario())


def test_a_lease_is_not_held_past_its_ttl_without_a_renewal() -> None:
    async def scenario() -> None:
        lease = Lease(ProcessLocalState(ttl_seconds=0.0), "work", "a", 1e-9)
        assert await lease.acquire()
        assert not lease.held

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        Lease(ProcessLocalState(), "work", "a", 0)


def test_the_keeper_runs_the_work_between_taking_and_losing() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)
        calls: list[str] = []

        async def taken() -> None:
            calls.append("taken")

        async def lost() -> None:
            calls.append("lost")

        keeper = LeaseKeeper(Lease(state, "work", holder_id(), 60), taken, lost)
        other = LeaseKeeper(Lease(state, "work", holder_id(), 60), taken, lost)
        assert await keeper.try_take() and keeper.active
        assert not await other.try_take() and not other.active
        await keeper.stop()
        assert calls == ["taken", "lost"] and not keeper.active
        assert await state.get("work") is None  # given back, not left to expire
        assert await other.try_take()
        await other.stop()

    asyncio.run(scenario())


def test_a_failing_on_taken_gives_the_lease_back() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)

        async def taken() -> None:
            raise RuntimeError("cannot start")

        async def lost() -> None:
            raise AssertionError("never active")

        keeper = LeaseKeeper(Lease(state, "work", "a", 60), taken, lost)
        with pytest.raises(RuntimeError):
            await keeper.try_take()
        assert not keeper.active
        assert await state.get("work") is None

    asyncio.run(scenario())


def test_the_keeper_calls_on_lost_when_a_renewal_finds_another_holder() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)
        lost = asyncio.Event()

        async def taken() -> None:
            pass

        async def on_lost() -> None:
            lost.set()

        keeper = LeaseKeeper(Lease(state, "work", "a", 0.3), taken, on_lost)
        assert await keeper.try_take()
        await state.put("work", b"b")  # another holder took it over
        keeper.start()
        await asyncio.wait_for(lost.wait(), 30)
        assert not keeper.active
        await keeper.stop()
        entry = await state.get("work")
        assert entry is not None and entry.value == b"b"  # not released: not ours

    asyncio.run(scenario())


def test_the_lease_is_renewed_while_the_work_starts() -> None:
    """A start longer than the lease's TTL keeps the lease: it is renewed meanwhile."""

    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=1.5)
        lease = Lease(state, "work", "a", 1.5)

        async def taken() -> None:
            first = await state.get("work")
            assert first is not None
            for _ in range(200):  # two renewals, about a TTL
                entry = await state.get("work")
                assert entry is not None
                if entry.revision >= first.revision + 2:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError("the lease was not renewed while its work started")

        async def lost() -> None:
            pass

        keeper = LeaseKeeper(lease, taken, lost)
        assert await keeper.try_take()
        assert keeper.active and lease.held
        await keeper.stop()

    asyncio.run(scenario())


def test_a_lease_lost_while_the_work_starts_cancels_the_start() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=60)
        lease = Lease(state, "work", "a", 0.6)
        cancelled = asyncio.Event()

        async def taken() -> None:
            await state.delete("work")  # as the TTL would after missed renewals
            assert await Lease(state, "work", "b", 60).acquire()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        async def lost() -> None:
            pass

        keeper = LeaseKeeper(lease, taken, lost)
        with pytest.raises(LeaseLost):
            await keeper.try_take()
        assert cancelled.is_set() and not keeper.active and not lease.held
        entry = await state.get("work")
        assert entry is not None and entry.value == b"b"  # the new holder's, untouched

    asyncio.run(scenario())


class _CancelledAsItRenews(Lease):
    """Cancels the keeper's task from inside a renewal that then succeeds: the two finish in
    the same turn of the event loop, as a ``stop()`` can meet a quick store's answer."""

    keeper: asyncio.Task[object] | None = None

    async def acquire(self) -> bool:
        self.keeper = asyncio.current_task()
        return await super().acquire()

    async def renew(self) -> bool:
        assert self.keeper is not None
        self.keeper.cancel()
        return await super().renew()


def test_a_keeper_cancelled_as_a_renewal_succeeds_ends() -> None:
    async def scenario() -> None:
        lease = _CancelledAsItRenews(ProcessLocalState(ttl_seconds=60), "work", "a", 0.3)

        async def nothing() -> None:
            return None

        keeper = LeaseKeeper(lease, nothing, nothing)
        keeper.start()
        while lease.keeper is None:
            await asyncio.sleep(0.01)
        done, _ = await asyncio.wait({lease.keeper}, timeout=30)  # only a swallowed cancel waits
        assert done, "the keeper swallowed its cancellation and kept renewing"
        assert lease.keeper.cancelled()

    asyncio.run(scenario())

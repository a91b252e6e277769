"""Groups whose deadlines pass together are closed together (a bounded number at once), not
one after another: on a slow shared state, one at a time would take thousands of groups far
past the second their incomplete events are due in."""

from __future__ import annotations

import asyncio
from typing import Any

from aviso_builtins.completion.consumer import CLOSE_CONCURRENCY
from aviso_plugins.state import ProcessLocalState
from tests.plugins.completion.test_completion_consumer import HOUR_AGO_NS, consumer, member

GROUPS = 3 * CLOSE_CONCURRENCY


class SlowClaims(ProcessLocalState):
    """A shared state whose claim operations each take a round trip; keeps how many were in
    flight at once, at most."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0

    async def _round_trip(self, key: str) -> None:
        if key.startswith(("c.", "p.")):
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            await asyncio.sleep(0.001)
            self.in_flight -= 1

    async def get(self, key: str) -> Any:
        await self._round_trip(key)
        return await super().get(key)

    async def create(self, key: str, value: bytes) -> int | None:
        await self._round_trip(key)
        return await super().create(key, value)

    async def put(self, key: str, value: bytes) -> int:
        await self._round_trip(key)
        return await super().put(key, value)


def test_groups_due_together_are_closed_together_a_bounded_number_at_once() -> None:
    async def scenario() -> None:
        state = SlowClaims()
        # Counted by a holder that never started (so no timer of its own), written at its
        # checkpoint: each group's deadline (an hour after its member) has just passed.
        writer = consumer(state, deadline_seconds=3600)
        for step in range(GROUPS):
            await writer.consume(member(step, 0, step + 1, HOUR_AGO_NS))
        await writer.checkpoint()
        assert state.most_in_flight <= 1
        state.most_in_flight = 0
        holder = consumer(state, deadline_seconds=3600)
        publisher = holder.context.publisher
        await holder.start()
        while len(publisher.events) < GROUPS:
            await publisher.next()
        await holder.close()
        steps = sorted(identifier["step"] for _, identifier, _, _ in publisher.events)
        assert steps == list(range(GROUPS))
        assert {identifier["status"] for _, identifier, _, _ in publisher.events} == {"incomplete"}
        assert 1 < state.most_in_flight <= CLOSE_CONCURRENCY

    asyncio.run(scenario())

"""The completion consumer fed a page at a time (what the host does): the same events as a
notification at a time, and a member whose counting fails does not stop its page."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aviso_plugins.consumers import ConsumedNotification, ConsumedPage
from aviso_plugins.storage import StoredNotification
from tests.plugins.completion.test_completion_consumer import (
    FailingOnce,
    consumer,
    member,
)


class Reported(ConsumedPage):
    """A page that keeps what the consumer reported failed."""

    def __init__(self, notifications: list[ConsumedNotification]) -> None:
        super().__init__("ens", notifications)
        self.failures: list[int] = []

    def failed(self, record: StoredNotification, exc: Exception) -> None:
        self.failures.append(record.sequence)


def shuffled_members() -> list[ConsumedNotification]:
    """Three steps of five members, two of them again, one member no step expects (with
    ``expected_values``), shuffled."""
    numbers = [(step, n) for step in (1, 2, 3) for n in range(5)] + [(2, 3), (3, 0), (1, 9)]
    random.Random(3).shuffle(numbers)
    return [member(step, n, sequence) for sequence, (step, n) in enumerate(numbers, 1)]


def test_a_page_publishes_what_its_notifications_one_at_a_time_do() -> None:
    notifications = shuffled_members()

    async def events(paged: bool, **rule: Any) -> list[tuple[Any, ...]]:
        completion = consumer(**rule)
        await completion.start()
        if paged:
            for start in range(0, len(notifications), 7):
                page = Reported(notifications[start : start + 7])
                await completion.consume_page(page)
                await completion.checkpoint()
                assert page.failures == []
        else:
            for notification in notifications:
                await completion.consume(notification)
            await completion.checkpoint()
        await completion.close()
        return completion.context.publisher.events

    for rule in ({}, {"expected_count": None, "expected_values": [0, 1, 2, 3, 4]}):
        one_at_a_time = asyncio.run(events(False, **rule))
        assert len(one_at_a_time) == 3
        assert asyncio.run(events(True, **rule)) == one_at_a_time


def test_a_member_whose_counting_fails_is_reported_and_its_page_goes_on() -> None:
    async def scenario() -> None:
        publisher = FailingOnce()
        completion = consumer(publisher=publisher)
        await completion.start()
        page = Reported(
            [member(4, n, n + 1) for n in range(5)] + [member(5, n, n + 6) for n in range(5)]
        )
        await completion.consume_page(page)
        assert page.failures == [5]  # the member that completed step 4
        await publisher.next()  # step 5's, counted after it
        await publisher.next()  # step 4's, tried again by the holder
        await completion.close()
        steps = sorted(identifier["step"] for _, identifier, _, _ in publisher.events)
        assert steps == [4, 5]

    asyncio.run(scenario())

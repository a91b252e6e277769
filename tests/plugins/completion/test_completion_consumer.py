"""The completion consumer's counting, claims and deadlines, fed notifications directly
(the server runs it through the notification-consumer hook: see test_completion_events).
Its state is a process-local shared-state bucket, as on the in-memory backend."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from aviso_builtins.completion.consumer import CompletionConsumer
from aviso_plugins.consumers import ConsumedNotification, ConsumerHistory, ConsumerMetrics
from aviso_plugins.sinks import SinkRejected
from aviso_plugins.state import ProcessLocalState, SharedState
from aviso_plugins.storage import StoredNotification
from tests.plugins.completion.support import config

HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


class Publisher:
    """Records what the consumer publishes; ``published`` is set at each publish."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], Any, str | None]] = []
        self.published = asyncio.Event()

    async def publish(
        self,
        event_type: str,
        identifier: Mapping[str, Any],
        payload: Any = None,
        message_id: str | None = None,
    ) -> StoredNotification:
        self.events.append((event_type, dict(identifier), payload, message_id))
        self.published.set()
        return StoredNotification(len(self.events), "x", "null", time.time_ns())

    async def next(self) -> None:
        await asyncio.wait_for(self.published.wait(), 10)
        self.published.clear()


class Counted(ConsumerMetrics):
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def count(self, event: str, amount: int = 1) -> None:
        self.counts[event] = self.counts.get(event, 0) + amount


class Pruned(ConsumerHistory):
    """A history pruned through ``through`` (set by the test)."""

    def __init__(self) -> None:
        self.through = 0

    async def pruned_through(self, event_type: str) -> int:
        return self.through


class FailingOnce(Publisher):
    """Fails its first publish (a store that did not answer), then publishes."""

    failed = False

    async def publish(self, *args: Any, **kwargs: Any) -> StoredNotification:
        if not self.failed:
            self.failed = True
            raise ConnectionError("the store did not answer")
        return await super().publish(*args, **kwargs)


@dataclass
class Context:
    publisher: Publisher
    event_types: tuple[str, ...]
    schemas: Mapping[str, Any]
    state: SharedState = field(default_factory=ProcessLocalState)
    metrics: Counted = field(default_factory=Counted)
    history: ConsumerHistory = field(default_factory=ConsumerHistory)


def consumer(
    state: SharedState | None = None,
    publisher: Publisher | None = None,
    history: ConsumerHistory | None = None,
    **rule: Any,
) -> CompletionConsumer:
    schemas = config(**rule)["notification_schema"]
    context = Context(
        publisher or Publisher(),
        ("ens",),
        schemas,
        state or ProcessLocalState(),
        history=history or ConsumerHistory(),
    )
    return CompletionConsumer(context)  # type: ignore[arg-type]


def member(
    step: int, number: int, sequence: int, time_ns: int | None = None
) -> ConsumedNotification:
    record = StoredNotification(
        sequence, f"ens.r1.{step}.{number}", "null", time_ns or time.time_ns()
    )
    identifier = {"run": "r1", "step": step, "member": number}
    return ConsumedNotification("ens", record, b"{}", identifier, None)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_five_members_make_one_complete_event() -> None:
    async def scenario() -> None:
        completion = consumer()
        await completion.start()
        for number in range(5):
            await completion.consume(member(24, number, number + 1))
        await completion.consume(member(24, 2, 6))  # a late copy changes nothing
        await completion.close()
        ((event_type, identifier, payload, message_id),) = completion.context.publisher.events
        assert event_type == "ens_complete"
        assert identifier == {"run": "r1", "step": 24, "status": "complete"}
        assert payload["count"] == 5 and payload["expected"] == 5 and payload["missing"] is None
        assert payload["first"]["sequence"] == 1 and payload["last"]["sequence"] == 5
        assert payload["first"]["time"].endswith("Z")
        assert message_id is not None

    run(scenario())


def test_a_member_published_again_counts_once() -> None:
    async def scenario() -> None:
        completion = consumer()
        await completion.start()
        for sequence, number in enumerate([0, 1, 1, 2, 3, 3, 0], start=1):
            await completion.consume(member(6, number, sequence))
        assert completion.context.publisher.events == []
        await completion.consume(member(6, 4, 8))
        assert len(completion.context.publisher.events) == 1
        await completion.close()

    run(scenario())


def test_the_deadline_publishes_incomplete_naming_the_missing_then_late_data_completes() -> None:
    async def scenario() -> None:
        completion = consumer(
            expected_count=None, expected_values=[0, 1, 2, 3, 4], deadline_seconds=60
        )
        publisher = completion.context.publisher
        await completion.start()
        for number in (0, 1, 3):
            await completion.consume(member(12, number, number + 1, HOUR_AGO_NS))
        await publisher.next()
        ((_, identifier, payload, _),) = publisher.events
        assert identifier["status"] == "incomplete"
        assert payload["count"] == 3 and payload["missing"] == [2, 4]
        await completion.consume(member(12, 2, 10))
        await completion.consume(member(12, 4, 11))
        assert [event[1]["status"] for event in publisher.events] == ["incomplete", "complete"]
        assert publisher.events[1][2]["missing"] == []
        await completion.close()

    run(scenario())


def test_a_new_holder_carries_on_where_the_last_stopped() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()
        first = consumer(state)
        await first.start()
        for number in range(3):
            await first.consume(member(3, number, number + 1))
        await first.checkpoint()  # the host moves the position past these three
        await first.close()
        second = consumer(state)
        await second.start()
        for number in range(2, 5):  # member 2 handed over again
            await second.consume(member(3, number, number + 3))
        await second.close()
        assert first.context.publisher.events == []
        assert [event[1]["status"] for event in second.context.publisher.events] == ["complete"]

    run(scenario())


def test_what_was_counted_since_the_last_checkpoint_is_counted_again_by_the_next_holder() -> None:
    """Groups are written at checkpoints only: a holder that stops between two hands its
    page over again (the position did not move), and nothing is published twice."""

    async def scenario() -> None:
        state = ProcessLocalState()
        first = consumer(state)
        await first.start()
        for number in range(2):
            await first.consume(member(3, number, number + 1))
        await first.checkpoint()
        for number in range(2, 5):
            await first.consume(member(3, number, number + 1))
        # Complete: published, though the page was not checkpointed before the holder died.
        await first.close()
        second = consumer(state)
        await second.start()
        for number in range(2, 5):  # the page handed over again
            await second.consume(member(3, number, number + 1))
        await second.checkpoint()
        await second.close()
        assert [event[1]["status"] for event in first.context.publisher.events] == ["complete"]
        assert second.context.publisher.events == []
        assert await state.keys("g.") == []

    run(scenario())


def test_an_event_claimed_but_not_published_is_published_by_the_next_holder() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()

        class Dying(Publisher):
            async def publish(self, *args: Any, **kwargs: Any) -> StoredNotification:
                raise ConnectionError("the holder died while publishing")

        first = consumer(state, Dying())
        await first.start()
        for number in range(4):
            await first.consume(member(9, number, number + 1))
        with pytest.raises(ConnectionError):
            await first.consume(member(9, 4, 5))
        await first.close()
        claims = await state.keys("c.")
        assert len(claims) == 1
        assert json.loads((await state.get(claims[0])).value)["published"] is False  # type: ignore[union-attr]
        second = consumer(state)
        await second.start()
        await second.consume(member(9, 4, 5))  # handed over again: counted already
        await second.close()
        ((_, identifier, _, message_id),) = second.context.publisher.events
        assert identifier["status"] == "complete"
        assert message_id == json.loads((await state.get(claims[0])).value)["message_id"]  # type: ignore[union-attr]
        third = consumer(state)
        await third.start()
        await third.close()
        assert third.context.publisher.events == []

    run(scenario())


def test_past_max_open_groups_the_oldest_is_closed_as_incomplete() -> None:
    async def scenario() -> None:
        completion = consumer(max_open_groups=2)
        await completion.start()
        for step in (1, 2, 3):
            await completion.consume(member(step, 0, step))
        ((_, identifier, payload, _),) = completion.context.publisher.events
        assert identifier == {"run": "r1", "step": 1, "status": "incomplete"}
        assert payload["count"] == 1
        assert completion.evicted == 1
        assert completion.context.metrics.counts == {"group_evicted": 1}  # type: ignore[attr-defined]
        await completion.close()

    run(scenario())


def test_a_complete_event_that_failed_to_publish_is_published_by_the_holder_itself() -> None:
    """The notification that completed the group is passed over when the publish fails, and
    nothing else of the group comes: the holder tries again itself, and never publishes
    ``incomplete`` for a complete group."""

    async def scenario() -> None:
        publisher = FailingOnce()
        completion = consumer(publisher=publisher, deadline_seconds=3600)
        await completion.start()
        for number in range(4):
            await completion.consume(member(12, number, number + 1))
        with pytest.raises(ConnectionError):
            await completion.consume(member(12, 4, 5))
        await publisher.next()
        await completion.close()
        ((_, identifier, payload, _),) = publisher.events
        assert identifier == {"run": "r1", "step": 12, "status": "complete"}
        assert payload["count"] == 5
        assert await completion.context.state.keys("g.") == []

    run(scenario())


def test_a_claim_that_fails_again_at_start_does_not_stop_the_start_and_is_published() -> None:
    """A holder that starts with an unpublished claim (its predecessor died publishing) and
    cannot publish it either still starts, and publishes it once it can."""

    async def scenario() -> None:
        state = ProcessLocalState()

        class Failing(Publisher):
            failures = 1

            async def publish(self, *args: Any, **kwargs: Any) -> StoredNotification:
                if self.failures:
                    self.failures -= 1
                    raise ConnectionError("the store did not answer")
                return await super().publish(*args, **kwargs)

        first = consumer(state, Failing())
        await first.start()
        for number in range(4):
            await first.consume(member(9, number, number + 1))
        with pytest.raises(ConnectionError):
            await first.consume(member(9, 4, 5))
        await first.close()  # died before its timer tried again
        publisher = Failing()
        second = consumer(state, publisher)
        await second.start()
        await publisher.next()
        await second.close()
        ((_, identifier, _, _),) = publisher.events
        assert identifier["status"] == "complete"
        assert await state.keys("p.") == [] and await state.keys("g.") == []

    run(scenario())


def test_values_the_rule_does_not_expect_are_not_kept() -> None:
    """With ``expected_values``, a publisher making up member values grows no group."""

    async def scenario() -> None:
        completion = consumer(expected_count=None, expected_values=[0, 1, 2, 3, 4])
        state = completion.context.state
        await completion.start()
        for number in range(100, 300):
            await completion.consume(member(5, number, number))
        assert await state.keys("g.") == []
        for number in range(5):
            await completion.consume(member(5, number, 300 + number))
        await completion.close()
        ((_, identifier, payload, _),) = completion.context.publisher.events
        assert identifier["status"] == "complete"
        assert payload["count"] == 5 and payload["missing"] == []

    run(scenario())


def test_a_claim_is_removed_once_every_notification_its_group_counted_is_pruned() -> None:
    async def scenario() -> None:
        history = Pruned()
        completion = consumer(history=history)
        state = completion.context.state
        await completion.start()
        for number in range(5):
            await completion.consume(member(24, number, number + 1))
        await completion.consume(member(7, 0, 6))  # another group, open
        await completion.checkpoint()
        assert await completion.remove_pruned_claims() == 0  # nothing pruned
        history.through = 4  # member 4 (sequence 5) is still retained
        assert await completion.remove_pruned_claims() == 0
        await completion.consume(member(24, 2, 7))  # a late copy: still nothing
        await completion.checkpoint()
        assert len(completion.context.publisher.events) == 1
        history.through = 5
        assert await completion.remove_pruned_claims() == 0  # the late copy is retained
        history.through = 7
        assert await completion.remove_pruned_claims() == 1
        assert await state.keys("c.") == []
        assert len(await state.keys("g.")) == 1  # open groups are not claims
        assert completion.context.metrics.counts == {"claim_removed": 1}  # type: ignore[attr-defined]
        await completion.close()

    run(scenario())


def test_an_evicted_group_keeps_its_incomplete_claim_while_its_later_members_are_retained() -> None:
    """Members counted after a group's incomplete event extend its claim's life when the
    group is then closed for ``max_open_groups``."""

    async def scenario() -> None:
        history = Pruned()
        completion = consumer(history=history, deadline_seconds=60, max_open_groups=1)
        publisher = completion.context.publisher
        await completion.start()
        await completion.consume(member(1, 0, 1, HOUR_AGO_NS))
        await publisher.next()  # its deadline passed: incomplete
        await completion.consume(member(1, 1, 2))
        await completion.consume(member(2, 0, 3))  # a second group: the first is closed
        assert [event[1]["status"] for event in publisher.events] == ["incomplete"]
        history.through = 1
        assert await completion.remove_pruned_claims() == 0
        history.through = 2
        assert await completion.remove_pruned_claims() == 1
        await completion.close()

    run(scenario())


def test_deadlines_pass_while_an_event_claimed_before_keeps_failing() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()

        class FailingComplete(Publisher):
            async def publish(
                self,
                event_type: str,
                identifier: Mapping[str, Any],
                payload: Any = None,
                message_id: str | None = None,
            ) -> StoredNotification:
                if identifier["status"] == "complete":
                    raise ConnectionError("the store did not answer")
                return await super().publish(event_type, identifier, payload, message_id)

        first = consumer(state, FailingComplete(), deadline_seconds=60)
        await first.start()
        for number in range(4):
            await first.consume(member(9, number, number + 1))
        with pytest.raises(ConnectionError):
            await first.consume(member(9, 4, 5))
        await first.close()
        publisher = FailingComplete()
        second = consumer(state, publisher, deadline_seconds=60)
        await second.start()  # the complete event fails again
        await second.consume(member(12, 0, 6, HOUR_AGO_NS))
        await publisher.next()
        await second.close()
        ((_, identifier, _, _),) = publisher.events
        assert identifier == {"run": "r1", "step": 12, "status": "incomplete"}

    run(scenario())


def test_two_holders_at_once_keep_the_members_either_counted() -> None:
    """A holder that lost its lease without knowing it yet may still checkpoint: its
    compare-and-set fails, and the group written keeps both holders' members."""

    async def scenario() -> None:
        state = ProcessLocalState()
        old, new = consumer(state), consumer(state)
        await old.start()
        for number in (0, 1):
            await old.consume(member(5, number, number + 1))
        await old.checkpoint()
        await new.start()  # takes the group over as written
        await old.consume(member(5, 2, 3))
        await old.checkpoint()
        await new.consume(member(5, 3, 4))
        await new.checkpoint()
        ((key,),) = [await state.keys("g.")]
        written = json.loads((await state.get(key)).value)  # type: ignore[union-attr]
        assert sorted(written["members"]) == ["0", "1", "2", "3"]
        await new.consume(member(5, 4, 5))
        assert [event[1]["status"] for event in new.context.publisher.events] == ["complete"]
        await old.close()
        await new.close()

    run(scenario())


def test_a_late_copy_keeps_its_groups_claim_while_it_is_retained() -> None:
    """A member published again after its group's complete event is a notification of the
    group: while it is retained the claim stays, so the group published anew (after a
    restart) cannot complete a second time."""

    async def scenario() -> None:
        history = Pruned()
        state = ProcessLocalState()
        first = consumer(state, history=history)
        await first.start()
        for number in range(5):
            await first.consume(member(24, number, number + 1))
        await first.consume(member(24, 2, 6))  # a late copy
        await first.checkpoint()
        history.through = 5  # every member it counted is pruned, not the late copy
        assert await first.remove_pruned_claims() == 0
        await first.close()
        second = consumer(state, history=history)
        await second.start()
        for number in range(5):
            await second.consume(member(24, number, 7 + number))
        await second.checkpoint()
        await second.close()
        assert second.context.publisher.events == []
        assert [event[1]["status"] for event in first.context.publisher.events] == ["complete"]

    run(scenario())


def test_the_claim_of_a_group_still_open_is_not_swept() -> None:
    """A group counting members after its incomplete event keeps its claim however much of
    its history is pruned, and hands the claim its later members when it is closed."""

    async def scenario() -> None:
        history = Pruned()
        state = ProcessLocalState()
        completion = consumer(state, history=history, deadline_seconds=60, max_open_groups=1)
        publisher = completion.context.publisher
        await completion.start()
        await completion.consume(member(1, 0, 1, HOUR_AGO_NS))
        await publisher.next()  # its deadline passed: incomplete
        await completion.consume(member(1, 1, 2))  # counted after it; the group stays open
        await completion.checkpoint()
        history.through = 1
        assert await completion.remove_pruned_claims() == 0
        await completion.consume(member(2, 0, 3))  # closes the first group (max_open_groups)
        await completion.checkpoint()
        assert await completion.remove_pruned_claims() == 0  # member 1 is retained
        history.through = 2
        assert await completion.remove_pruned_claims() == 1
        await completion.close()
        assert [event[1]["status"] for event in publisher.events] == ["incomplete"]

    run(scenario())


def test_a_member_whose_claim_read_fails_is_counted_once_the_state_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shared state that fails a read once does not make the member be passed over (its
    group could then never complete)."""
    monkeypatch.setattr("aviso_builtins.completion.consumer.READ_RETRY_SECONDS", 0.01)

    class FailingOnce(ProcessLocalState):
        failed = False

        async def get(self, key: str) -> Any:
            if not self.failed:
                self.failed = True
                raise ConnectionError("the store did not answer")
            return await super().get(key)

    async def scenario() -> None:
        completion = consumer(FailingOnce())
        await completion.start()
        for number in range(5):
            await completion.consume(member(3, number, number + 1))
        await completion.close()
        assert completion.context.state.failed  # type: ignore[attr-defined]
        statuses = [event[1]["status"] for event in completion.context.publisher.events]
        assert statuses == ["complete"]

    run(scenario())


def test_the_claims_sweep_gives_the_event_loop_turns() -> None:
    """Sweeping many claims on a process-local state (which never suspends) lets other
    tasks run before it ends."""

    async def scenario() -> None:
        history = Pruned()
        completion = consumer(history=history)
        state = completion.context.state
        await completion.start()
        claim = {"event_type": "ens_complete", "published": True}
        for number in range(1000):
            last = {"sequence": number + 1, "time": "t"}
            value = {**claim, "payload": {"last": last}}
            await state.create(f"c.{number:032x}.complete", json.dumps(value).encode())
        history.through = 10_000
        swept = False
        ran_while_sweeping: list[bool] = []

        async def other() -> None:
            ran_while_sweeping.append(not swept)

        task = asyncio.create_task(other())
        assert await completion.remove_pruned_claims() == 1000
        swept = True
        await task
        assert ran_while_sweeping == [True]
        await completion.close()

    run(scenario())


def test_closing_the_oldest_open_group_does_not_look_at_every_open_group() -> None:
    """Past ``max_open_groups``, each new group closes the oldest: the work that takes does
    not grow with the number of open groups (counted in Python calls, not timed)."""

    async def scenario() -> None:
        completion = consumer(max_open_groups=5000)
        await completion.start()
        for step in range(5000):
            await completion.consume(member(step, 0, step + 1))
        await completion.checkpoint()
        calls = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            nonlocal calls
            calls += event == "call"

        sys.setprofile(profile)
        try:
            await completion.consume(member(5000, 0, 5001))
        finally:
            sys.setprofile(None)
        assert completion.evicted == 1
        ((_, identifier, _, _),) = completion.context.publisher.events
        assert identifier["step"] == 0  # the oldest
        assert calls < 1000
        await completion.close()

    run(scenario())


def test_a_new_holder_reads_the_open_groups_several_at_once() -> None:
    """Taking the consumer over reads the open groups concurrently (one at a time, ten
    thousand of them on JetStream took half the lease's life), and holds every one."""

    class Counting(ProcessLocalState):
        reading = 0
        most = 0

        async def get(self, key: str) -> Any:
            self.reading += 1
            self.most = max(self.most, self.reading)
            try:
                await asyncio.sleep(0)  # a store that answers later
                return await super().get(key)
            finally:
                self.reading -= 1

    async def scenario() -> None:
        state = Counting()
        first = consumer(state)
        await first.start()
        for step in range(200):
            await first.consume(member(step, 0, step + 1))
        await first.checkpoint()
        await first.close()
        state.most = 0
        second = consumer(state)
        await second.start()
        assert state.most > 1
        assert len(await second.open_groups(1000, {"ens"})) == 200
        await second.close()

    run(scenario())


def test_an_event_the_api_refuses_is_not_retried_and_does_not_keep_its_group_open() -> None:
    """A completion event the notify API refuses (its topic too long for the limits once
    the completion event's base and status are added to a member's long group values) can
    never be published: it is counted and logged once, not retried every second, and its
    group is closed like any other, so ``max_open_groups`` still holds."""

    class Refusing(Publisher):
        async def publish(
            self,
            event_type: str,
            identifier: Mapping[str, Any],
            payload: Any = None,
            message_id: str | None = None,
        ) -> StoredNotification:
            if identifier["step"] == 1:
                raise SinkRejected("INVALID_NOTIFICATION_REQUEST", "topic too long")
            return await super().publish(event_type, identifier, payload, message_id)

    async def scenario() -> None:
        completion = consumer(publisher=Refusing(), max_open_groups=1)
        state = completion.context.state
        await completion.start()
        for step in (1, 2, 3):
            await completion.consume(member(step, 0, step))
        await completion.checkpoint()
        events = completion.context.publisher.events
        assert [(event[1]["step"], event[1]["status"]) for event in events] == [(2, "incomplete")]
        assert completion.evicted == 2
        assert len(await completion.open_groups(10, {"ens"})) == 1
        assert completion.context.metrics.counts["event_refused"] == 1  # type: ignore[attr-defined]
        assert await state.keys("p.") == []
        await completion.close()

    run(scenario())


def test_a_group_another_holder_wrote_since_the_start_gets_its_incomplete_event() -> None:
    """A holder that lost its lease without knowing it may still write a group after the
    new holder started; the new holder times that group's deadline when it reads it."""

    async def scenario() -> None:
        state = ProcessLocalState()
        old, new = consumer(state, deadline_seconds=60), consumer(state, deadline_seconds=60)
        await new.start()
        await old.start()
        await old.consume(member(5, 0, 1, HOUR_AGO_NS))
        await old.checkpoint()
        await old.close()  # stopped before its own timer ran
        assert old.context.publisher.events == []
        await new.consume(member(5, 1, 2))
        await new.context.publisher.next()
        ((_, identifier, payload, _),) = new.context.publisher.events
        assert identifier["status"] == "incomplete" and payload["count"] == 2
        await new.close()

    run(scenario())


def test_closed_groups_do_not_stay_filed_for_the_timer_until_their_deadline() -> None:
    async def scenario() -> None:
        completion = consumer(expected_count=1)
        await completion.start()
        for step in range(5000):
            await completion.consume(member(step, 0, step + 1))
        assert len(completion.context.publisher.events) == 5000
        assert len(completion._deadlines) <= 1024 + 1
        await completion.close()

    run(scenario())

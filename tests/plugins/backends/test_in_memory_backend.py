"""The in-memory backend's numbering, de-duplication and byte budget, driven in-process.

Sequences are consecutive per stream (an unfiltered pyaviso listener needs N,
N+1, ...) and an ``Idempotency-Key`` (stored as ``Nats-Msg-Id``) is honoured as JetStream
honours it. Retained notifications are bounded in bytes, oldest evicted first and
reported as pruned history.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import pytest

from aviso_builtins.backends import in_memory
from aviso_builtins.backends.in_memory import (
    RECORD_OVERHEAD_BYTES,
    InMemoryBackend,
    record_bytes,
)
from aviso_plugins.topics import TopicPattern
from aviso_plugins.types import (
    ACTOR_METADATA,
    MESSAGE_ID_METADATA,
    BackendContext,
    BackendMetrics,
    MessageIdNotRetained,
    MessageIdReused,
    StartCursor,
    StoredNotification,
    Writer,
)

T = TypeVar("T")


def run(scenario: Callable[[InMemoryBackend], Awaitable[T]], **options: Any) -> T:
    backend = InMemoryBackend(BackendContext({"max_history_per_topic": 1000, **options}, {}))
    return asyncio.run(scenario(backend))


def keyed(message_id: str) -> Mapping[str, str]:
    return {MESSAGE_ID_METADATA: message_id}


async def history(backend: InMemoryBackend, base: str, depth: int = 1) -> list[int]:
    pattern = TopicPattern((base, *([None] * depth)))
    batch = await backend.fetch_batch(pattern, StartCursor(), 100_000)
    return [record.sequence for record in batch.messages]


class Collecting:
    def __init__(self) -> None:
        self.records: list[StoredNotification] = []

    def deliver(self, record: StoredNotification) -> None:
        self.records.append(record)

    def end(self, reason: str) -> None:
        raise AssertionError(reason)


# -- numbering ----------------------------------------------------------------------------


def test_each_stream_numbers_its_own_notifications_from_one() -> None:
    async def scenario(backend: InMemoryBackend) -> list[tuple[str, int]]:
        topics = ["alpha.1", "beta.1", "alpha.2", "beta.2", "Alpha.3", "gamma.1", "alpha.4"]
        return [(topic, (await backend.publish(topic, "null", {})).sequence) for topic in topics]

    assert run(scenario) == [
        ("alpha.1", 1),
        ("beta.1", 1),
        ("alpha.2", 2),
        ("beta.2", 2),
        # Streams are case-insensitive, like JetStream's upper-cased stream names.
        ("Alpha.3", 3),
        ("gamma.1", 1),
        ("alpha.4", 4),
    ]


def test_wipes_and_deletes_never_restart_or_reuse_a_stream_s_numbers() -> None:
    async def scenario(backend: InMemoryBackend) -> dict[str, Any]:
        for n in range(3):
            await backend.publish(f"alpha.{n}", "null", {})
        await backend.publish("beta.0", "null", {})
        assert await backend.delete_message("ALPHA", 3)
        after_delete = (await backend.publish("alpha.9", "null", {})).sequence
        await backend.wipe_stream("alpha")
        after_wipe = (await backend.publish("alpha.9", "null", {})).sequence
        await backend.wipe_all()
        return {
            "after_delete": after_delete,
            "after_wipe": after_wipe,
            "after_wipe_all": (await backend.publish("alpha.9", "null", {})).sequence,
            "beta_after_wipe_all": (await backend.publish("beta.0", "null", {})).sequence,
            "alpha_pruned": await backend.pruned_through("alpha"),
            "beta_pruned": await backend.pruned_through("BETA"),
            "alpha": await history(backend, "alpha"),
        }

    assert run(scenario) == {
        "after_delete": 4,
        "after_wipe": 5,
        "after_wipe_all": 6,
        "beta_after_wipe_all": 2,
        "alpha_pruned": 5,
        "beta_pruned": 1,
        "alpha": [6],
    }


def test_deletes_address_a_sequence_within_its_stream_only() -> None:
    async def scenario(backend: InMemoryBackend) -> tuple[bool, bool, list[int], list[int]]:
        await backend.publish("alpha.1", "null", {})
        await backend.publish("beta.1", "null", {})
        missing = await backend.delete_message("gamma", 1)
        deleted = await backend.delete_message("beta", 1)
        return missing, deleted, await history(backend, "alpha"), await history(backend, "beta")

    assert run(scenario) == (False, True, [1], [])


def test_history_is_read_per_stream() -> None:
    async def scenario(backend: InMemoryBackend) -> None:
        await backend.fetch_batch(TopicPattern((None, "x")), StartCursor(), 10)

    with pytest.raises(ValueError, match="per stream"):
        run(scenario)


# -- de-duplication -------------------------------------------------------------------------


def test_a_resent_message_id_is_dropped_and_answered_with_the_first_sequence() -> None:
    async def scenario(backend: InMemoryBackend) -> dict[str, Any]:
        watcher = Collecting()
        await backend.subscribe(TopicPattern(("alpha", None)), watcher)
        first = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        again = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        other = await backend.publish("alpha.2", '{"n":3}', keyed("k2"))
        # Same id on another stream: not a duplicate there.
        elsewhere = await backend.publish("beta.1", "null", keyed("k1"))
        return {
            "sequences": [first.sequence, again.sequence, other.sequence, elsewhere.sequence],
            "stored": await history(backend, "alpha"),
            "delivered": [record.sequence for record in watcher.records],
        }

    assert run(scenario) == {"sequences": [1, 1, 2, 1], "stored": [1, 2], "delivered": [1, 2]}


def test_a_remembered_id_with_another_notification_is_refused_and_nothing_stored() -> None:
    async def scenario(backend: InMemoryBackend) -> list[Any]:
        await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        refused = []
        # Another payload, another subject of the same stream, other metadata: each refused.
        for topic, payload, metadata in (
            ("alpha.1", '{"n":2}', keyed("k1")),
            ("alpha.2", '{"n":1}', keyed("k1")),
            ("alpha.1", '{"n":1}', {**keyed("k1"), "identifier": "{}"}),
        ):
            with pytest.raises(MessageIdReused) as error:
                await backend.publish(topic, payload, metadata)
            refused.append(error.value.message_id)
        # The publisher is not part of the notification: another caller's re-send is one.
        again = await backend.publish(
            "alpha.1", '{"n":1}', {**keyed("k1"), ACTOR_METADATA: '"bob"'}
        )
        return [refused, again.sequence, await history(backend, "alpha")]

    assert run(scenario) == [["k1", "k1", "k1"], 1, [1]]


def test_a_re_send_is_answered_with_the_stored_record_marked_replayed() -> None:
    async def scenario(backend: InMemoryBackend) -> list[Any]:
        first = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        again = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        return [first.replayed, again.replayed, again.sequence, again.time_ns == first.time_ns]

    assert run(scenario) == [False, True, 1, True]


def test_a_re_send_of_a_notification_no_longer_retained_is_refused_not_stored() -> None:
    async def scenario(backend: InMemoryBackend) -> tuple[list[str], list[int]]:
        refused = []
        # Replaced by a newer notification on its topic (one kept per topic), deleted,
        # wiped: the id outlives its message, as on JetStream, and the re-send of each is
        # neither acknowledged nor stored again.
        await backend.publish("alpha.1", "null", keyed("replaced"))
        await backend.publish("alpha.1", '{"n":2}', {})
        await backend.publish("alpha.2", "null", keyed("deleted"))
        assert await backend.delete_message("alpha", 3)
        await backend.publish("alpha.3", "null", keyed("wiped"))
        await backend.wipe_all()
        for topic, key in (("alpha.1", "replaced"), ("alpha.2", "deleted"), ("alpha.3", "wiped")):
            with pytest.raises(MessageIdNotRetained) as error:
                await backend.publish(topic, "null", keyed(key))
            refused.append(error.value.message_id)
        return refused, await history(backend, "alpha")

    backend = InMemoryBackend(BackendContext({"max_history_per_topic": 1}, {}))
    assert asyncio.run(scenario(backend)) == (["replaced", "deleted", "wiped"], [])


def test_an_id_is_forgotten_once_the_window_has_passed() -> None:
    async def scenario(backend: InMemoryBackend) -> list[int]:
        first = await backend.publish("alpha.1", "null", keyed("k1"))
        time.sleep(1.05)  # lets the 1 s window pass (not synchronisation)
        second = await backend.publish("alpha.1", "null", keyed("k1"))
        return [first.sequence, second.sequence]

    # The index of retained ids off: the window alone decides.
    assert run(scenario, duplicate_window="1s", idempotency_index=False) == [1, 2]


def test_the_window_is_bounded_in_count() -> None:
    async def scenario(backend: InMemoryBackend) -> list[int]:
        for key in ("a", "b", "c"):
            await backend.publish("alpha.1", "null", keyed(key))
        # "a" was the oldest of three ids with room for two: forgotten, so stored again.
        resent = [await backend.publish("alpha.1", "null", keyed(key)) for key in ("c", "a")]
        return [record.sequence for record in resent]

    assert run(
        scenario, duplicate_window="1h", duplicate_window_max_keys=2, idempotency_index=False
    ) == [3, 4]


def test_past_the_window_a_retained_id_is_still_answered_with_its_record() -> None:
    async def scenario(backend: InMemoryBackend) -> list[Any]:
        first = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        time.sleep(1.05)  # lets the 1 s window pass (not synchronisation)
        again = await backend.publish("alpha.1", '{"n":1}', keyed("k1"))
        with pytest.raises(MessageIdReused):
            await backend.publish("alpha.1", '{"n":2}', keyed("k1"))
        return [first.sequence, again.sequence, again.replayed, await history(backend, "alpha")]

    assert run(scenario, duplicate_window="1s") == [1, 1, True, [1]]


def test_the_retained_ids_are_not_bounded_by_the_window_budgets() -> None:
    async def scenario(backend: InMemoryBackend) -> list[tuple[int, bool]]:
        for index in range(5):
            await backend.publish(f"alpha.{index}", "null", keyed(f"k{index}"))
        # Two ids fit the window; all five notifications are retained, so all are known.
        resent = [await backend.publish(f"alpha.{i}", "null", keyed(f"k{i}")) for i in range(5)]
        return [(record.sequence, record.replayed) for record in resent]

    expected = [(index + 1, True) for index in range(5)]
    assert run(scenario, duplicate_window="1h", duplicate_window_max_keys=2) == expected


def test_past_the_window_an_id_no_longer_retained_stores_its_notification_anew() -> None:
    async def scenario(backend: InMemoryBackend) -> list[int]:
        await backend.publish("alpha.1", "null", keyed("k1"))
        await backend.publish("alpha.1", '{"n":2}', {})  # replaces it (one kept per topic)
        time.sleep(1.05)  # lets the 1 s window pass (not synchronisation)
        again = await backend.publish("alpha.1", "null", keyed("k1"))
        return [again.sequence, *await history(backend, "alpha")]

    backend = InMemoryBackend(BackendContext({"duplicate_window": "1s"}, {}))
    assert asyncio.run(scenario(backend)) == [3, 3]


class Evictions(BackendMetrics):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def message_ids_evicted_early(self, reason: str, count: int = 1) -> None:
        self.reasons += [reason] * count


def test_a_writer_over_its_budget_forgets_only_its_own_ids_and_it_is_counted() -> None:
    evictions = Evictions()
    options = {
        "max_history_per_topic": 1000,
        "duplicate_window": "1h",
        "duplicate_window_max_keys_per_writer": 2,
        "idempotency_index": False,
    }
    backend = InMemoryBackend(BackendContext(options, {}, evictions))
    alice, mallory = Writer(username="alice"), Writer(address="127.0.0.9")

    async def scenario() -> list[int]:
        await backend.publish_from(alice, "alpha.1", "null", keyed("a"))
        for index in range(5):
            await backend.publish_from(mallory, "alpha.1", "null", keyed(f"m{index}"))
        # Another stream is another budget: mallory's ids there leave its alpha ids alone.
        await backend.publish_from(mallory, "beta.1", "null", keyed("m4"))
        resent = [
            await backend.publish_from(writer, "alpha.1", "null", keyed(key))
            for writer, key in ((alice, "a"), (mallory, "m4"), (mallory, "m0"))
        ]
        return [record.sequence for record in resent]

    # alice's id and mallory's newest are remembered; mallory's oldest was forgotten.
    assert asyncio.run(scenario()) == [1, 6, 7]
    assert evictions.reasons == ["writer_budget"] * 3 + ["writer_budget"]


def test_past_the_total_the_writer_holding_the_most_ids_gives_up_its_oldest() -> None:
    evictions = Evictions()
    options = {
        "max_history_per_topic": 1000,
        "duplicate_window": "1h",
        "duplicate_window_max_keys": 4,
        "idempotency_index": False,
    }
    backend = InMemoryBackend(BackendContext(options, {}, evictions))
    quiet, other, flood = Writer(address="127.0.0.2"), Writer(username="bob"), Writer()

    async def scenario() -> list[tuple[int, bool]]:
        await backend.publish_from(quiet, "alpha.1", "null", keyed("q"))
        await backend.publish_from(other, "beta.1", "null", keyed("o"))
        # The flood fills the total, then goes on: each new id of its own costs its oldest.
        for index in range(6):
            await backend.publish_from(flood, "alpha.1", "null", keyed(f"f{index}"))
        resent = [
            await backend.publish_from(writer, topic, "null", keyed(key))
            for writer, topic, key in (
                (quiet, "alpha.1", "q"),
                (other, "beta.1", "o"),
                (flood, "alpha.1", "f5"),
                (flood, "alpha.1", "f0"),
            )
        ]
        return [(record.sequence, record.replayed) for record in resent]

    # The quiet writers' ids and the flood's newest are remembered; its oldest was not.
    assert asyncio.run(scenario()) == [(1, True), (1, True), (7, True), (8, False)]
    assert evictions.reasons == ["total_budget"] * 5


@pytest.mark.parametrize(
    ("window", "reason"),
    [
        ("0s", "must be greater than 0"),
        ("10 minutes", "invalid duration"),
        ("2mo", "invalid duration"),
        ("999999999999w", "too long"),
    ],
)
def test_an_unusable_window_is_refused_naming_the_key(window: str, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        InMemoryBackend(BackendContext({"duplicate_window": window}, {}))
    assert str(refused.value).startswith("notification_backend.in_memory.duplicate_window: ")
    assert reason in str(refused.value)


# -- byte budget ------------------------------------------------------------------------------


PAYLOAD = '"' + "x" * 998 + '"'


@pytest.mark.parametrize(
    ("topic", "payload", "metadata"),
    [
        ("alpha.0", PAYLOAD, {}),
        ("alpha.0", '"x"', {"identifier": '{"k":"v"}', "actor": '"me"'}),
        ("%C3%A9t%C3%A9.0", '"\u00e9t\u00e9 \u2603"', {"identifier": '{"k":"\u00e9"}'}),
        ("alpha.0", '"snow \u2603 \U0001f600"', {"cl\u00e9": "\u00e9"}),
    ],
)
def test_a_record_is_charged_its_utf8_bytes_and_the_overhead(
    topic: str, payload: str, metadata: dict[str, str]
) -> None:
    texts = [topic, payload, *metadata, *metadata.values()]
    expected = RECORD_OVERHEAD_BYTES + sum(len(text.encode("utf-8")) for text in texts)
    assert record_bytes(StoredNotification(1, topic, payload, 0, metadata)) == expected


def test_the_byte_budget_evicts_the_oldest_first_and_reports_the_gap() -> None:
    one = record_bytes(StoredNotification(1, "alpha.0", PAYLOAD, 0, {}))

    async def scenario(backend: InMemoryBackend) -> dict[str, Any]:
        # Interleaved streams and topics: eviction follows publish order across all of them.
        for n in range(10):
            await backend.publish(f"{'alpha' if n % 2 else 'beta'}.{n % 3}", PAYLOAD, {})
        return {
            "alpha": await history(backend, "alpha"),
            "beta": await history(backend, "beta"),
            "alpha_pruned": await backend.pruned_through("alpha"),
            "beta_pruned": await backend.pruned_through("beta"),
            "within_budget": backend.retained_bytes <= 4 * one,
        }

    outcome = run(scenario, max_bytes=4 * one)
    # Publishes 7..10 survive: alpha's 4th and 5th (n = 7, 9), beta's 4th and 5th (n = 6, 8).
    assert outcome == {
        "alpha": [4, 5],
        "beta": [4, 5],
        "alpha_pruned": 3,
        "beta_pruned": 3,
        "within_budget": True,
    }


def test_the_newest_notification_is_kept_even_over_the_budget() -> None:
    async def scenario(backend: InMemoryBackend) -> tuple[list[int], int]:
        await backend.publish("alpha.1", "null", {})
        await backend.publish("alpha.2", PAYLOAD, {})
        return await history(backend, "alpha"), backend.retained_bytes

    stored, retained = run(scenario, max_bytes=RECORD_OVERHEAD_BYTES)
    assert stored == [2]
    assert retained > RECORD_OVERHEAD_BYTES


def test_removals_give_their_bytes_back() -> None:
    async def scenario(backend: InMemoryBackend) -> list[int]:
        seen = []
        for n in range(5):
            await backend.publish(f"alpha.{n}", PAYLOAD, {"identifier": "{}"})
        seen.append(backend.retained_bytes)
        await backend.delete_message("alpha", 1)
        seen.append(backend.retained_bytes)
        await backend.wipe_stream("alpha")
        seen.append(backend.retained_bytes)
        return seen

    full, after_delete, after_wipe = run(scenario)
    assert full > after_delete > after_wipe == 0
    assert full - after_delete == full // 5


# -- bounded pages ----------------------------------------------------------------------------


def test_a_sparse_page_stops_at_the_examination_bound_and_resumes_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(in_memory, "MAX_EXAMINED_PER_PAGE", 10)

    async def scenario(backend: InMemoryBackend) -> list[tuple[list[int], bool, int | None]]:
        for n in range(25):
            await backend.publish(f"alpha.{'hit' if n in (3, 22) else 'miss'}", "null", {})
        pattern = TopicPattern(("alpha", "hit"))
        pages = []
        cursor = StartCursor()
        while True:
            batch = await backend.fetch_batch(pattern, cursor, 5)
            pages.append(
                ([r.sequence for r in batch.messages], batch.has_more, batch.next_sequence)
            )
            if not batch.has_more:
                return pages
            cursor = StartCursor(from_sequence=batch.next_sequence)

    assert run(scenario) == [([4], True, 11), ([], True, 21), ([23], False, 24)]


def test_a_log_compacted_many_times_reads_back_what_is_retained() -> None:
    """Evicting a topic per publish leaves dead entries in the stream's log until it is
    compacted (many times over here): reads by sequence and by time see exactly the
    retained records, in order."""

    async def scenario(backend: InMemoryBackend) -> None:
        published = [await backend.publish(f"s.{n}", f'{{"n":{n}}}', {}) for n in range(5_000)]
        retained = published[-10:]
        assert await history(backend, "s") == [record.sequence for record in retained]
        pattern = TopicPattern(("s", None))
        middle = retained[4]
        for start in (
            StartCursor(from_sequence=middle.sequence),
            StartCursor(from_time_ns=middle.time_ns),
        ):
            batch = await backend.fetch_batch(pattern, start, 100)
            assert [record.sequence for record in batch.messages] == [
                record.sequence for record in retained[4:]
            ]
        # The age queue holds no evicted topic's record.
        assert list(backend._by_age) == retained

    run(scenario, max_topics=10)


def test_publish_from_goes_through_a_publish_overridden_on_the_instance() -> None:
    """``publish_from`` calls ``publish`` by default (the plugin contract); the backend's own
    shortcut past it must not skip a ``publish`` shadowed on the instance or a subclass's."""

    class Subclassed(InMemoryBackend):
        async def publish(
            self, topic: str, payload: str, metadata: Mapping[str, str]
        ) -> StoredNotification:
            seen.append(("subclass", topic))
            return await super().publish(topic, payload, metadata)

    seen: list[tuple[str, str]] = []

    async def scenario(backend: InMemoryBackend) -> None:
        store = backend.publish

        async def shadowed(topic: str, payload: str, metadata: Mapping[str, str]) -> Any:
            seen.append(("instance", topic))
            return await store(topic, payload, metadata)

        backend.publish = shadowed  # type: ignore[method-assign]
        await backend.publish_from(Writer(), "a.1", "null", {})
        subclassed = Subclassed(BackendContext({}, {}))
        await subclassed.publish_from(Writer(), "b.1", "null", {})
        plain = InMemoryBackend(BackendContext({}, {}))
        assert (await plain.publish_from(Writer(), "c.1", "null", {})).sequence == 1

    run(scenario)
    assert seen == [("instance", "a.1"), ("subclass", "b.1")]

"""``notification_backend.jetstream.duplicate_window`` against a real nats-server.

The window is how long JetStream remembers a ``Nats-Msg-Id``: the Spark writer's idempotent
re-runs rely on it. The backend is driven in-process (no HTTP in between); streams are
inspected directly with nats-py. Refusals run as real ``aviso-server serve`` children.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aviso_builtins.backends.jetstream.backend import SEEN_IDS_PER_WRITER, JetStreamBackend
from aviso_builtins.backends.jetstream.options import OptionsError, parse_options
from aviso_plugins.types import (
    MESSAGE_ID_METADATA,
    BackendContext,
    BackendMetrics,
    MessageIdNotRetained,
    MessageIdRefused,
    MessageIdReused,
    Writer,
)
from tests.host.backends.jetstream_support import (
    Case,
    document,
    serve_refusals,
    stream_config,
    stream_state,
    unique,
)
from tests.support.nats import NatsServer

NATS_DEFAULT_WINDOW = 120.0
PUBLISHED_AT_ONCE = 50
EVICTION_RUN_TIMEOUT = 600.0
"""Bound on the 10,001 publishes of the eviction test: only a hang takes that long."""


def publish_all(
    nats_url: str,
    base: str,
    message_ids: list[str | None],
    options: Mapping[str, Any] | None = None,
    policy: Mapping[str, Any] | None = None,
    first_index: int = 0,
) -> list[str]:
    """Start a backend, publish one notification per id to ``<base>.<index % 2>``, shut
    down (indexes count from ``first_index``); each outcome: ``stored``, ``replayed`` or
    the refusal's code."""
    policies = {base: {"allow_duplicates": True, **(policy or {})}}
    context = BackendContext({"nats_url": nats_url, **(options or {})}, policies)

    async def run() -> list[str]:
        backend = JetStreamBackend(context)
        await backend.start()
        outcomes = []
        try:
            for index, message_id in enumerate(message_ids, first_index):
                metadata = {MESSAGE_ID_METADATA: message_id} if message_id else {}
                try:
                    record = await backend.publish(f"{base}.{index % 2}", '{"n":1}', metadata)
                except MessageIdRefused as refused:
                    outcomes.append(refused.code)
                else:
                    outcomes.append("replayed" if record.replayed else "stored")
        finally:
            await backend.shutdown()
        return outcomes

    return asyncio.run(asyncio.wait_for(run(), 30))


def window_of(nats_url: str, base: str) -> float:
    config = stream_config(nats_url, base.upper())
    assert config is not None, f"stream {base.upper()} was not created"
    return config.duplicate_window


def test_created_stream_carries_the_configured_window(module_nats: NatsServer) -> None:
    base = unique("win")
    publish_all(module_nats.url, base, ["a"], {"duplicate_window": "10m"})
    assert window_of(module_nats.url, base) == 600


def test_unset_window_leaves_the_nats_default(module_nats: NatsServer) -> None:
    base = unique("win")
    publish_all(module_nats.url, base, ["a"])
    assert window_of(module_nats.url, base) == NATS_DEFAULT_WINDOW


def test_a_republished_message_id_inside_the_window_is_stored_once(
    module_nats: NatsServer,
) -> None:
    base = unique("dedup")
    # Same id on different subjects too: de-duplication is per stream, not per subject, and
    # a notification on another subject is another notification. Each through a backend of
    # its own, so that the broker's answer is what decides, not what an instance remembers.
    outcomes = [
        publish_all(module_nats.url, base, [message_id], {"duplicate_window": "1h"}, None, index)
        for index, message_id in enumerate(["id-1", "id-1", "id-2", "id-1", "id-2", "id-1", "id-1"])
    ]
    reused = ["IDEMPOTENCY_KEY_REUSED"]
    replayed = ["replayed"]
    assert outcomes == [["stored"], reused, ["stored"], reused, replayed, reused, replayed]
    assert stream_state(module_nats.url, base.upper()).messages == 2


def test_an_instance_refuses_a_message_id_it_stored_for_another_notification(
    module_nats: NatsServer,
) -> None:
    base = unique("reuse")
    context = BackendContext({"nats_url": module_nats.url}, {base: {"allow_duplicates": True}})

    async def run() -> list[str]:
        backend = JetStreamBackend(context)
        await backend.start()
        outcomes = []
        try:
            for topic, payload in ((".1", "1"), (".1", "1"), (".2", "1"), (".1", "2")):
                try:
                    await backend.publish(base + topic, payload, {MESSAGE_ID_METADATA: "k"})
                    outcomes.append("ok")
                except MessageIdReused as refused:
                    outcomes.append(f"refused {refused.message_id}")
        finally:
            await backend.shutdown()
        return outcomes

    assert asyncio.run(asyncio.wait_for(run(), 30)) == ["ok", "ok", "refused k", "refused k"]
    assert stream_state(module_nats.url, base.upper()).messages == 1


def test_a_message_id_another_instance_stored_is_checked_against_the_stored_message(
    module_nats: NatsServer,
) -> None:
    base = unique("reuse")
    publish_all(module_nats.url, base, ["k"], {"duplicate_window": "1h"})
    context = BackendContext(
        {"nats_url": module_nats.url, "duplicate_window": "1h"}, {base: {"allow_duplicates": True}}
    )

    async def run() -> list[str]:
        backend = JetStreamBackend(context)
        await backend.start()
        outcomes = []
        try:
            # Another instance stored "k" first: this one remembers nothing of it, and the
            # broker drops both sends. Each is compared with the message the broker keeps.
            for topic, payload in ((".1", '{"n":2}'), (".0", '{"n":2}'), (".0", '{"n":1}')):
                try:
                    record = await backend.publish(
                        base + topic, payload, {MESSAGE_ID_METADATA: "k"}
                    )
                except MessageIdReused as refused:
                    outcomes.append(f"refused {refused.message_id}")
                else:
                    outcomes.append(f"replayed {record.sequence}" if record.replayed else "stored")
        finally:
            await backend.shutdown()
        return outcomes

    assert asyncio.run(asyncio.wait_for(run(), 30)) == ["refused k", "refused k", "replayed 1"]
    assert stream_state(module_nats.url, base.upper()).messages == 1


def test_a_re_send_whose_message_is_no_longer_retained_is_refused(
    module_nats: NatsServer,
) -> None:
    base = unique("gone")
    # One message per subject (JetStream's default here): a newer one replaces the first.
    context = BackendContext({"nats_url": module_nats.url}, {base: {"allow_duplicates": False}})

    async def run() -> list[str]:
        backend = JetStreamBackend(context)
        await backend.start()
        refused = []
        try:
            await backend.publish(f"{base}.1", "null", {MESSAGE_ID_METADATA: "replaced"})
            await backend.publish(f"{base}.1", '{"n":2}', {})
            deleted = await backend.publish(f"{base}.2", "null", {MESSAGE_ID_METADATA: "deleted"})
            assert await backend.delete_message(base, deleted.sequence)
            for key, topic in (("replaced", ".1"), ("deleted", ".2")):
                with pytest.raises(MessageIdNotRetained) as error:
                    await backend.publish(base + topic, "null", {MESSAGE_ID_METADATA: key})
                refused.append(error.value.message_id)
            # A purge empties the stream but not the broker's memory of the ids.
            await backend.publish(f"{base}.3", "null", {MESSAGE_ID_METADATA: "purged"})
            await backend.wipe_stream(base)
            with pytest.raises(MessageIdNotRetained) as error:
                await backend.publish(f"{base}.3", "null", {MESSAGE_ID_METADATA: "purged"})
            refused.append(error.value.message_id)
        finally:
            await backend.shutdown()
        return refused

    assert asyncio.run(asyncio.wait_for(run(), 30)) == ["replaced", "deleted", "purged"]
    assert stream_state(module_nats.url, base.upper()).messages == 0


def test_a_re_send_with_text_beyond_ascii_is_recognised_by_another_instance(
    module_nats: NatsServer,
) -> None:
    base = unique("text")
    context = BackendContext({"nats_url": module_nats.url}, {base: {"allow_duplicates": True}})
    # Header values as the host writes them: JSON text, here with accents, an encoded-word
    # look-alike and quotes, which an e-mail header parser would not give back as sent.
    metadata = {
        "identifier": '{"name":"Zürich =?utf-8?q?x?= \\"q\\""}',
        MESSAGE_ID_METADATA: "k",
    }

    async def publish_through_new_instance(payload: str) -> tuple[int, bool]:
        backend = JetStreamBackend(context)
        await backend.start()
        try:
            record = await backend.publish(f"{base}.1", payload, metadata)
            return record.sequence, record.replayed
        finally:
            await backend.shutdown()

    async def run() -> list[tuple[int, bool]]:
        return [
            await publish_through_new_instance('{"city":"Zürich"}'),
            await publish_through_new_instance('{"city":"Zürich"}'),
        ]

    assert asyncio.run(asyncio.wait_for(run(), 30)) == [(1, False), (1, True)]


class Evictions(BackendMetrics):
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def message_ids_evicted_early(self, reason: str, count: int = 1) -> None:
        self.reasons += [reason] * count


@pytest.mark.timeout(EVICTION_RUN_TIMEOUT + 60)
def test_the_instance_s_remembered_ids_report_their_early_evictions(
    module_nats: NatsServer,
) -> None:
    base = unique("evict")
    evictions = Evictions()
    # An hour's window: on a loaded machine the publishes may take longer than the default
    # two minutes, and ids forgotten at the window's end are not early evictions.
    context = BackendContext(
        {"nats_url": module_nats.url, "duplicate_window": "1h"},
        {base: {"allow_duplicates": True}},
        evictions,
    )
    writer = Writer(address="127.0.0.9")
    budget = SEEN_IDS_PER_WRITER

    async def run() -> None:
        backend = JetStreamBackend(context)
        await backend.start()
        # Only an id stored fresh is remembered: a keyed publish whose acknowledgement came
        # late (a loaded machine) is sent again and answered as a replay, so new ids are
        # published until one past the budget were stored fresh. Few at a time, so that
        # acknowledgements do not queue behind each other.
        fresh = 0
        sent = 0
        try:
            while fresh < budget + 1:
                records = await asyncio.gather(
                    *(
                        backend.publish_from(
                            writer, f"{base}.1", "null", {MESSAGE_ID_METADATA: f"k{n}"}
                        )
                        for n in range(sent, sent + min(PUBLISHED_AT_ONCE, budget + 1 - fresh))
                    )
                )
                sent += len(records)
                fresh += sum(not record.replayed for record in records)
        finally:
            await backend.shutdown()

    asyncio.run(asyncio.wait_for(run(), EVICTION_RUN_TIMEOUT))
    # One id past the writer's budget: its own oldest was forgotten, and reported.
    assert evictions.reasons == ["writer_budget"]


def test_messages_without_an_id_are_all_stored(module_nats: NatsServer) -> None:
    base = unique("dedup")
    publish_all(module_nats.url, base, [None, None, None], {"duplicate_window": "1h"})
    assert stream_state(module_nats.url, base.upper()).messages == 3


def test_an_existing_stream_is_reconciled_to_the_window_keeping_its_messages(
    module_nats: NatsServer,
) -> None:
    base = unique("recon")
    publish_all(module_nats.url, base, ["a", "b"])
    assert window_of(module_nats.url, base) == NATS_DEFAULT_WINDOW
    publish_all(module_nats.url, base, ["a", "c"], {"duplicate_window": "2h"})
    assert window_of(module_nats.url, base) == 7200
    # "a" was stored before the update: the stream still remembers it.
    assert stream_state(module_nats.url, base.upper()).messages == 3


def test_a_schema_retention_shorter_than_the_window_caps_it(module_nats: NatsServer) -> None:
    # JetStream refuses a window longer than the stream's max_age.
    base = unique("capped")
    publish_all(module_nats.url, base, ["a"], {"duplicate_window": "1h"}, {"retention_time": "30m"})
    assert window_of(module_nats.url, base) == 1800


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"duplicate_window": "0s"}, "must be greater than 0"),
        ({"duplicate_window": "10 minutes"}, "invalid duration"),
        ({"duplicate_window": "2mo"}, "invalid duration"),
        ({"duplicate_window": "999999999999w"}, "too long"),
        ({"duplicate_window": "2d", "retention_time": "1d"}, "must not be longer than"),
    ],
)
def test_an_unusable_window_is_refused_naming_the_key(options: dict[str, Any], reason: str) -> None:
    with pytest.raises(OptionsError) as refused:
        parse_options(options, environ={})
    assert str(refused.value).startswith("notification_backend.jetstream.duplicate_window: ")
    assert reason in str(refused.value)


def test_aviso_serve_refuses_to_start_with_an_unusable_window(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    cases = {
        "grammar": Case(document(module_nats.url, jetstream={"duplicate_window": "5 min"})),
        "not_text": Case(document(module_nats.url, jetstream={"duplicate_window": 300})),
        "longer_than_retention": Case(
            document(module_nats.url, jetstream={"duplicate_window": "2h", "retention_time": "1h"})
        ),
    }
    for refusal in serve_refusals(tmp_path, cases).values():
        refusal.assert_refused("duplicate_window")

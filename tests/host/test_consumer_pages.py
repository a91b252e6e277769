"""Notification consumers fed a page at a time (``consume_page``): on a real server, the
named identifier fields read from the stored records; and the host's field reader on
records this service did not write."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import pytest

from aviso_host.consumers import SchemaRecordReader, StoredPage
from aviso_host.schemas import EventSchema
from aviso_plugins import hookimpl
from aviso_plugins.testing import ConfigError, build_app, serve
from aviso_plugins.types import (
    ConsumedNotification,
    ConsumedPage,
    NotificationConsumer,
    StoredNotification,
)

CONFIG = """
notification_backend: {kind: in_memory}
notification_schema:
  step:
    topic: {base: step, key_order: [run]}
    identifier:
      run: {type: StringHandler, required: true}
      member: {type: IntHandler, required: true}
      class: {type: StringHandler, required: true}
"""


class Pages(NotificationConsumer):
    """Keeps what each page's ``fields`` and ``notifications`` give."""

    name = "pages"
    event_types: ClassVar[frozenset[str] | None] = frozenset({"step"})
    start_at = "beginning"
    fields: ClassVar[list[tuple[int, tuple[Any, ...]]]] = []
    sequences: ClassVar[list[int]] = []

    async def consume_page(self, page: ConsumedPage) -> None:
        assert page.event_type == "step"
        Pages.fields += [
            (record.sequence, values) for record, values in page.fields(["member", "class"])
        ]
        Pages.sequences += [n.record.sequence for n in page.notifications()]


class PagesPlugin:
    @hookimpl
    def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
        return [Pages]


def test_a_page_consumer_reads_the_named_fields_of_every_notification() -> None:
    Pages.fields.clear()
    Pages.sequences.clear()
    identifiers: list[dict[str, Any]] = [
        {"run": "r1", "member": 7, "class": "od"},
        {"run": "r2", "member": 8, "class": "ef"},
        {"run": "r3", "class": "od", "member": "09"},  # canonical text: 9
    ]
    with serve(CONFIG, plugins=[PagesPlugin()]) as aviso:
        for identifier in identifiers:
            assert aviso.notify("step", identifier).is_success
        deadline = time.monotonic() + 30
        while len(Pages.sequences) < 3:
            assert time.monotonic() < deadline, Pages.sequences
            time.sleep(0.05)
    assert Pages.sequences == [1, 2, 3]
    # As the API shows them: text, in the order named.
    assert Pages.fields == [(1, ("7", "od")), (2, ("8", "ef")), (3, ("9", "od"))]


def test_a_consumer_that_implements_neither_consume_method_fails_startup() -> None:
    class Idle(NotificationConsumer):
        name = "idle"

    class IdlePlugin:
        @hookimpl
        def aviso_notification_consumers(self) -> list[type[NotificationConsumer]]:
            return [Idle]

    with pytest.raises(ConfigError, match="'idle' implements neither consume nor consume_page"):
        build_app(CONFIG, plugins=[IdlePlugin()])


def record(sequence: int, identifier: str | None) -> StoredNotification:
    metadata = {} if identifier is None else {"identifier": identifier}
    return StoredNotification(sequence, "step.r", "null", time.time_ns(), metadata)


def page_of(records: list[StoredNotification]) -> StoredPage:
    schema = cast(EventSchema, SimpleNamespace(spatial_keys=()))
    renderer: Any = None  # never reached: each record's stored identifier is read
    return StoredPage("test", "step", records, SchemaRecordReader(renderer, schema))


def test_fields_of_records_another_writer_stored_are_read_from_the_whole_identifier() -> None:
    records = [
        record(1, '{"run":"r","member":"1"}'),
        record(2, '{"run":"r","member":2}'),  # a number: read as the identifier holds it
        record(3, '{"run":"r","member":null}'),
        record(4, '{"run":"r"}'),  # no member: left out
        record(5, '{"member":"5","run":"r","member":"6"}'),  # the last of a repeated field
    ]
    expected = [(1, ("1", "r")), (2, (2, "r")), (3, (None, "r")), (5, ("6", "r"))]
    found = page_of(records).fields(["member", "run"])
    assert [(r.sequence, values) for r, values in found] == expected


def test_a_record_that_cannot_be_read_is_passed_over() -> None:
    page = page_of([record(1, "{not json"), record(2, '{"run":"r","member":"2"}')])
    assert [(r.sequence, values) for r, values in page.fields(["member"])] == [(2, ("2",))]
    assert [n.record.sequence for n in page.notifications()] == [2]


class Failures(ConsumedPage):
    """A page that keeps what was reported failed."""

    def __init__(self, notifications: list[ConsumedNotification]) -> None:
        super().__init__("step", notifications)
        self.failures: list[tuple[int, str]] = []

    def failed(self, record: StoredNotification, exc: Exception) -> None:
        self.failures.append((record.sequence, str(exc)))


def test_by_default_a_page_is_consumed_a_notification_at_a_time() -> None:
    """A consumer of single notifications gets each in order; one that raises is reported
    and the page goes on."""

    class One(NotificationConsumer):
        name = "one"
        seen: ClassVar[list[int]] = []

        async def consume(self, notification: ConsumedNotification) -> None:
            One.seen.append(notification.record.sequence)
            if notification.payload == "boom":
                raise RuntimeError("boom")

    notifications = [
        ConsumedNotification("step", record(n, None), b"{}", {"run": "r", "n": n}, payload)
        for n, payload in ((1, None), (2, "boom"), (3, None))
    ]
    page = Failures(notifications)
    assert len(page) == 3
    assert page.fields(["n"]) == [(n.record, (n.record.sequence,)) for n in notifications]
    asyncio.run(One(cast(Any, None)).consume_page(page))
    assert One.seen == [1, 2, 3]
    assert page.failures == [(2, "boom")]
    assert json.loads(notifications[0].cloudevent) == {}

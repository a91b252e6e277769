"""The Spark writer's rows are validated once: on the executor, not again in the ``backend`` sink.

A field-handler plugin counts every value it canonicalises; the rows go through the writer's
own row-to-notification step (``RowMapping.notification``) and the ``backend`` sink the
writer's runtime builds, into the real in-memory backend.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from aviso_host.config import settings_from_document
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from aviso_plugins import hookimpl
from aviso_plugins.types import FieldHandler, InvalidValue, Notification, SinkOutcome

pytest.importorskip("pyspark", reason="the 'spark' extra is not installed")

from pyspark.sql import Row

from aviso_spark.rows import RowMapping
from aviso_spark.runtime import HostRuntime

ROWS = 50
DOCUMENT: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 8000},
    "notification_backend": {"kind": "in_memory"},
    "notification_schema": {
        "painted": {
            "payload": {"required": False},
            "topic": {"base": "painted", "key_order": ["colour"]},
            "identifier": {"colour": {"type": "CountingHandler", "required": True}},
        }
    },
}
MAPPING = RowMapping("painted", (("colour", "colour"),), payload_columns=("size",))


class CountingPlugin:
    """A field handler that counts what it canonicalises (and refuses ``"invalid"``)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        calls = self.calls

        class CountingHandler(FieldHandler):
            type_name = "CountingHandler"

            def canonicalise(self, text: str) -> str:
                calls[text] += 1
                if text == "invalid":
                    raise InvalidValue("not a colour")
                return text

        self.handler = CountingHandler

    @hookimpl
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return [self.handler]


def runtime(plugin: CountingPlugin) -> HostRuntime:
    """What ``aviso_spark.runtime.host_runtime`` builds on an executor, from this document."""
    registry = discover(extra=[plugin])
    settings = settings_from_document(DOCUMENT, registry)
    return HostRuntime(
        registry, settings, CatalogPlanner(SchemaCatalog(settings, registry.field_handlers))
    )


def publish(host: HostRuntime, notifications: list[Notification]) -> list[SinkOutcome]:
    sink = host.sink("backend", {})

    async def run() -> list[SinkOutcome]:
        await sink.start()
        try:
            return await sink.publish_batch(notifications)
        finally:
            await sink.close()

    return asyncio.run(run())


def test_rows_planned_by_the_writer_are_not_validated_again_by_the_backend_sink() -> None:
    plugin = CountingPlugin()
    host = runtime(plugin)
    rows = [Row(colour=f"c{index}", size=index) for index in range(ROWS)]
    notifications = [MAPPING.notification(row, host.planner) for row in rows]
    planned_once = Counter({f"c{index}": plugin.calls[f"c{index}"] for index in range(ROWS)})
    assert set(planned_once.values()) == {1}, planned_once

    outcomes = publish(host, notifications)

    assert [outcome.error for outcome in outcomes] == [None] * ROWS
    assert plugin.calls == planned_once, "the sink validated a planned row again"


def test_notifications_without_a_plan_are_validated_by_the_sink() -> None:
    # The counter does see the sink's validation: a producer that did not plan still gets it.
    plugin = CountingPlugin()
    host = runtime(plugin)
    notifications = [
        Notification("painted", {"colour": colour}, None) for colour in ("red", "invalid")
    ]

    outcomes = publish(host, notifications)

    assert plugin.calls == Counter({"red": 1, "invalid": 1})
    assert outcomes[0].error is None
    assert outcomes[1].error is not None
    assert outcomes[1].error.code == "INVALID_NOTIFICATION_REQUEST"


def test_a_key_re_used_for_another_row_is_a_rejection_and_the_same_row_is_not() -> None:
    host = runtime(CountingPlugin())
    notifications = [
        Notification("painted", {"colour": "red"}, {"size": size}, message_id="row-1")
        for size in (1, 1, 2)
    ]

    outcomes = publish(host, notifications)

    assert [outcome.error.code if outcome.error else None for outcome in outcomes] == [
        None,
        None,
        "IDEMPOTENCY_KEY_REUSED",
    ]
    assert outcomes[2].retries == 0

"""A sink's options go through its ``options_schema`` (text converted, defaults filled in)
and a sink refusing them is one error naming the option, the sink and its plugin."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from aviso_plugins import hookimpl
from aviso_plugins.types import Notification, Sink, SinkOutcome

pytest.importorskip("pyspark", reason="the 'spark' extra is not installed")

from aviso_spark.runtime import HostRuntime

DOCUMENT: dict[str, Any] = {
    "application": {"host": "127.0.0.1", "port": 8000},
    "notification_backend": {"kind": "in_memory"},
}


class QueueSink(Sink):
    name = "queue"
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["queue"],
        "properties": {
            "queue": {"type": "string"},
            "depth": {"type": "integer", "minimum": 1, "default": 8},
            "password": {"type": "string", "writeOnly": True},
        },
    }

    async def publish_batch(self, notifications: Sequence[Notification]) -> list[SinkOutcome]:
        return [SinkOutcome() for _ in notifications]


class _Plugin:
    @hookimpl
    def aviso_sinks(self) -> list[type[Sink]]:
        return [QueueSink]


def runtime() -> HostRuntime:
    registry = discover(extra=[_Plugin()])
    settings = settings_from_document(DOCUMENT, registry)
    return HostRuntime(
        registry, settings, CatalogPlanner(SchemaCatalog(settings, registry.field_handlers))
    )


def test_sink_options_are_converted_and_defaulted() -> None:
    sink = runtime().sink("queue", {"queue": "q1", "depth": "3"})
    assert sink.context.options == {"queue": "q1", "depth": 3}
    assert runtime().sink("queue", {"queue": "q1"}).context.options["depth"] == 8


def test_sink_options_are_checked_naming_the_option() -> None:
    with pytest.raises(ConfigError, match=r"^sink: missing required key 'queue'$"):
        runtime().sink("queue", {})
    with pytest.raises(ConfigError, match=r"^sink\.depth: 0 is less than the minimum 1$"):
        runtime().sink("queue", {"queue": "q1", "depth": "0"})


def test_a_built_in_sink_refusing_an_option_names_its_plugin() -> None:
    with pytest.raises(ConfigError) as refused:
        runtime().sink("http", {"url": "http://127.0.0.1:1", "retries": "many"})
    message = str(refused.value)
    assert message.startswith("sink: sink option 'retries' must be an integer, got 'many' [sink ")
    assert "'http' (entry point 'http_sink' of aviso-py" in message

"""The testing kit: an app from a configuration dict with the built-ins plus plugin objects,
a client that reads notify/watch/replay, and the pytest fixture."""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from aviso_builtins.backends.in_memory import InMemoryBackend
from aviso_host.config import ConfigError
from aviso_host.plugins import PluginError
from aviso_plugins import hookimpl
from aviso_plugins.testing import (
    READ_TIMEOUT,
    EventStream,
    StreamError,
    build_app,
    run_sink,
    serve,
)
from aviso_plugins.types import (
    FieldHandler,
    InvalidValue,
    Notification,
    Sink,
    SinkOutcome,
    StorageBackend,
)
from tests.support.failing_history import FailingHistoryPlugin, with_failing_history


class UpperHandler(FieldHandler):
    type_name: ClassVar[str] = "UpperHandler"

    def canonicalise(self, text: str) -> str:
        if not text.isalpha():
            raise InvalidValue(f"Field '{self.field}' must be letters, got: '{text}'")
        return text.upper()


class UpperPlugin:
    @hookimpl
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return [UpperHandler]


CONFIG: dict[str, Any] = {
    "notification_schema": {
        "shout": {
            "topic": {"base": "shout", "key_order": ["word"]},
            "identifier": {"word": {"type": "UpperHandler", "required": True}},
        }
    }
}


def test_the_app_has_the_built_ins_without_any_entry_point_of_other_packages() -> None:
    app = build_app({"notification_backend": {"kind": "jetstream"}})  # checked, not started
    assert app.state.service.settings.backend.kind == "jetstream"


def test_a_plugin_object_is_used_without_installing_it() -> None:
    with pytest.raises(ConfigError, match="UpperHandler"):
        build_app(CONFIG)
    build_app(CONFIG, plugins=[UpperPlugin()])


def test_a_clash_with_a_built_in_is_refused() -> None:
    class Clash(UpperHandler):
        type_name: ClassVar[str] = "IntHandler"

    class ClashPlugin:
        @hookimpl
        def aviso_field_handlers(self) -> list[type[FieldHandler]]:
            return [Clash]

    with pytest.raises(PluginError, match="both provide type_name 'IntHandler'"):
        build_app(CONFIG, plugins=[ClashPlugin()])


def test_notify_watch_and_replay_through_a_real_server() -> None:
    with serve(CONFIG, plugins=[UpperPlugin()]) as aviso:
        assert aviso.base_url.host == "127.0.0.1"
        with aviso.watch("shout", {"word": "hey"}) as live:
            assert aviso.notify("shout", {"word": "hey"}, {"n": 1}).status_code == 200
            event = live.until("live-notification")
        assert event.is_notification and event.data["data"]["payload"] == {"n": 1}
        assert event.data["data"]["identifier"] == {"word": "HEY"}
        replay = aviso.replay("shout", {"word": "Hey"})
        assert isinstance(replay, EventStream) and replay.ended
        assert [e.data["data"]["identifier"] for e in replay.notifications()] == [{"word": "HEY"}]
        assert replay.events[-1].kind == "connection-closing"
        refused = aviso.notify("shout", {"word": "h3y"})
        assert refused.status_code == 400
        assert refused.json()["message"] == "Field 'word' must be letters, got: 'h3y'"


def test_a_refused_stream_is_an_assertion_with_the_answer() -> None:
    with (
        serve(CONFIG, plugins=[UpperPlugin()]) as aviso,
        pytest.raises(AssertionError, match="INVALID"),
    ):
        aviso.replay("shout", {"word": "1"})


def test_until_fails_when_the_stream_ends_first() -> None:
    with serve(CONFIG, plugins=[UpperPlugin()]) as aviso:
        aviso.notify("shout", {"word": "a"})
        replay = aviso.replay("shout", {"word": "a"})
    with pytest.raises(AssertionError, match="no 'live-notification' event"):
        replay.until("live-notification")


def test_a_watch_resuming_from_a_sequence_opens_and_follows_history_then_live() -> None:
    with serve(CONFIG, plugins=[UpperPlugin()]) as aviso:
        assert aviso.notify("shout", {"word": "word"}, {"n": 1}).status_code == 200
        with aviso.watch("shout", {"word": "word"}, from_id="1") as live:
            assert live.events[0].kind == "replay-control/replay_started"
            assert aviso.notify("shout", {"word": "word"}, {"n": 2}).status_code == 200
            live.until(lambda event: event.is_notification and event.data["sequence"] == 2)
        payloads = [event.data["data"]["payload"] for event in live.notifications()]
        assert payloads == [{"n": 1}, {"n": 2}]


def test_until_gives_up_at_its_own_timeout_and_loses_nothing_by_it() -> None:
    quiet = {**CONFIG, "watch_endpoint": {"sse_heartbeat_interval_sec": 3600}}
    with (
        serve(quiet, plugins=[UpperPlugin()]) as aviso,
        aviso.watch("shout", {"word": "late"}) as live,
    ):
        started = time.monotonic()
        with pytest.raises(AssertionError, match=r"no 'live-notification' event within 0\.2 s"):
            live.until("live-notification", timeout=0.2)
        # Well inside the client's own read timeout: the wait was the one asked for.
        assert time.monotonic() - started < READ_TIMEOUT
        assert aviso.notify("shout", {"word": "late"}).status_code == 200
        event = live.until("live-notification")
    assert event.data["data"]["identifier"] == {"word": "LATE"}


def test_the_fixture_is_registered_with_pytest() -> None:
    plugins = importlib.metadata.entry_points(group="pytest11")
    assert "aviso_plugins.pytest_plugin" in {entry.value for entry in plugins}


def test_the_fixture_serves_and_stops(aviso_server: Any) -> None:
    aviso = aviso_server(CONFIG, plugins=[UpperPlugin()])
    assert aviso.get("/health").status_code == 200


# -- what a plugin's own tests need, without importing the host --------------------------------


def test_the_kit_exports_the_errors_a_plugin_test_expects() -> None:
    from aviso_plugins import testing

    assert testing.ConfigError is ConfigError and testing.PluginError is PluginError
    with pytest.raises(testing.ConfigError, match="UpperHandler"):
        build_app(CONFIG)


def test_a_replay_ending_in_an_error_event_raises() -> None:
    config = {
        **with_failing_history({"notification_backend": {"kind": "in_memory"}}),
        "notification_schema": {
            "note": {
                "topic": {"base": "note", "key_order": ["name"]},
                "identifier": {"name": {"type": "StringHandler", "required": True}},
            }
        },
    }
    with serve(config, plugins=[FailingHistoryPlugin()]) as aviso:
        assert aviso.notify("note", {"name": "fine"}).status_code == 200
        assert len(aviso.replay("note", {"name": "fine"}).notifications()) == 1
        # The failing store refuses to read this topic's history.
        assert aviso.notify("note", {"name": "failing-now"}).status_code == 200
        with pytest.raises(StreamError, match="stream_processing_failed") as failure:
            aviso.replay("note", {"name": "failing-now"})
    assert failure.value.event.name == "error"


class Unstartable(InMemoryBackend):
    kind: ClassVar[str] = "unstartable"

    async def start(self) -> None:
        raise OSError("the disk is on fire")


class UnstartablePlugin:
    @hookimpl
    def aviso_storage_backends(self) -> list[type[StorageBackend]]:
        return [Unstartable]


def test_a_startup_failure_carries_its_cause() -> None:
    config = {"notification_backend": {"kind": "unstartable"}}
    with (
        pytest.raises(PluginError, match="the disk is on fire") as failure,
        serve(config, plugins=[UnstartablePlugin()]),
    ):
        pass
    message = str(failure.value)
    assert message.startswith("the aviso test server did not start: notification_backend")
    assert "storage backend 'unstartable' (registered in code)" in message
    assert isinstance(failure.value.__cause__, OSError)


def test_the_server_exposes_its_metrics_registry() -> None:
    with serve(CONFIG, plugins=[UpperPlugin()]) as aviso:
        before = _notified(aviso.metrics_registry)
        assert aviso.notify("shout", {"word": "hey"}).status_code == 200
        assert _notified(aviso.metrics_registry) == before + 1


def _notified(registry: Any) -> float:
    return sum(
        sample.value
        for family in registry.collect()
        if family.name == "aviso_notifications"
        for sample in family.samples
        if sample.name == "aviso_notifications_total" and sample.labels["event_type"] == "shout"
    )


class Collecting(Sink):
    name: ClassVar[str] = "collecting"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"batch_label": {"type": "string"}, "copies": {"type": "integer"}},
        "required": ["batch_label"],
    }
    published: ClassVar[list[tuple[str, Notification, int]]] = []

    async def publish_batch(self, notifications: Sequence[Notification]) -> list[SinkOutcome]:
        for item in notifications:
            options = self.context.options
            self.published.append((options["batch_label"], item, options.get("copies", 1)))
        return [SinkOutcome() for _ in notifications]


class CollectingPlugin:
    @hookimpl
    def aviso_sinks(self) -> list[type[Sink]]:
        return [Collecting]


def test_run_sink_validates_as_spark_does_and_publishes_the_rest() -> None:
    Collecting.published.clear()
    outcomes = run_sink(
        "collecting",
        [("shout", {"word": "hey"}, {"n": 1}), ("shout", {"word": "h3y"}, None)],
        options={"batch_label": "b1", "copies": "2"},
        config=CONFIG,
        plugins=[UpperPlugin(), CollectingPlugin()],
    )
    assert outcomes[0].error is None
    rejected = outcomes[1].error
    assert rejected is not None and rejected.code == "INVALID_NOTIFICATION_REQUEST"
    [(label, item, copies)] = Collecting.published
    assert (label, copies) == ("b1", 2)  # the options schema converted the text
    assert item.planned is not None and item.planned.topic == "shout.HEY"


def test_run_sink_refuses_options_against_its_schema() -> None:
    with pytest.raises(ConfigError, match="sink"):
        run_sink("collecting", [], options={}, plugins=[CollectingPlugin()])

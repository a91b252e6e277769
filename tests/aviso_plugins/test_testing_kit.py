"""The testing kit: an app from a configuration dict with the built-ins plus plugin objects,
a client that reads notify/watch/replay, and the pytest fixture."""

from __future__ import annotations

import importlib.metadata
from typing import Any, ClassVar

import pytest

from aviso_host.config import ConfigError
from aviso_host.plugins import PluginError
from aviso_plugins import hookimpl
from aviso_plugins.testing import EventStream, build_app, serve
from aviso_plugins.types import FieldHandler, InvalidValue


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


def test_the_fixture_is_registered_with_pytest() -> None:
    plugins = importlib.metadata.entry_points(group="pytest11")
    assert "aviso_plugins.pytest_plugin" in {entry.value for entry in plugins}


def test_the_fixture_serves_and_stops(aviso_server: Any) -> None:
    aviso = aviso_server(CONFIG, plugins=[UpperPlugin()])
    assert aviso.get("/health").status_code == 200
